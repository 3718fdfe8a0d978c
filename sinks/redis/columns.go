package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
)

// columnsKey is the set of the columns of a table the sink has written
// (<base>#columns): a column of a record's table not in it was added at
// the source since, and the rows stored before hold its missing value.
func columnsKey(base string) string { return base + "#columns" }

// fillAdded records the columns of records' tables (rows' and OpShape's)
// in their columns sets
// and, before a column the set lacks is recorded, gives every live row of
// its table the column's missing value (pipeline.Column.Missing: ALTER
// TABLE … ADD COLUMN … DEFAULT, whose rows hold the default with no change
// event). It runs before the records are written, so every row it fills
// predates the column (in the hash format a row's absent field is also
// how NULL is stored: a row written with the column is never filled). A
// crash between the fill and the SADD fills again, changing nothing. A
// table whose set does not exist yet (its first write, or a table written
// before the sets existed) records its columns without a fill.
func (s *Sink) fillAdded(ctx context.Context, records []pipeline.Record) error {
	for i := range records {
		t := records[i].Table
		if t == nil || !isRow(&records[i]) && records[i].Op != pipeline.OpShape {
			continue
		}
		if err := s.fillTable(ctx, t); err != nil {
			if te := tableError(ctx, s.info(t), err); te != nil {
				return te
			}
			return err
		}
	}
	return nil
}

// fillTable is fillAdded for one table.
func (s *Sink) fillTable(ctx context.Context, t *pipeline.Table) error {
	if s.filled[t] {
		return nil
	}
	ti := s.info(t)
	known := s.columns[ti.base]
	if known == nil {
		names, err := s.client.SMembers(ctx, columnsKey(ti.base)).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return err
		}
		known = make(map[string]bool, len(names))
		for _, n := range names {
			known[n] = true
		}
	}
	var added, pairs []any
	first := len(known) == 0
	for j := range t.Columns {
		c := &t.Columns[j]
		if known[c.Name] {
			continue
		}
		added = append(added, c.Name)
		if c.Missing != nil && !first {
			enc, err := textform.Encode(c, c.Missing)
			if err != nil {
				return &pipeline.TableError{Table: t.ID, Err: fmt.Errorf("redis: column %s: missing value: %w", c.Name, err)}
			}
			pairs = append(pairs, c.Name, enc)
		}
	}
	if len(pairs) > 0 {
		n, err := s.fill(ctx, ti, pairs)
		if err != nil {
			return err
		}
		s.log.Info("added columns filled with their missing values", zap.Stringer("table", t.ID),
			zap.Int("columns", len(pairs)/2), zap.Int("rows", n))
	}
	if len(added) > 0 {
		if err := s.client.SAdd(ctx, columnsKey(ti.base), added...).Err(); err != nil {
			return err
		}
		for _, n := range added {
			known[n.(string)] = true
		}
	}
	s.columns[ti.base] = known
	s.filled[t] = true
	return nil
}

// fill runs operation f of the script over the table's row keys, one SCAN
// page at a time, and returns how many rows it changed.
func (s *Sink) fill(ctx context.Context, ti *tableInfo, pairs []any) (int, error) {
	argv := append([]any{"f", s.opts.Format[:1]}, pairs...)
	total := 0
	var cursor uint64
	for {
		keys, next, err := s.client.Scan(ctx, cursor, ti.pattern, scanCount).Result()
		if err != nil {
			return total, err
		}
		if len(keys) > 0 {
			n, err := s.client.EvalSha(ctx, s.sha, append([]string{ti.barrier}, keys...), argv...).Int()
			if goredis.HasErrorPrefix(err, "NOSCRIPT") {
				n, err = s.client.Eval(ctx, writeScript, append([]string{ti.barrier}, keys...), argv...).Int()
			}
			if err != nil {
				return total, err
			}
			total += n
		}
		if next == 0 {
			return total, nil
		}
		cursor = next
	}
}

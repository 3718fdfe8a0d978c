package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
)

// Rows returns the live rows of a source table, with values aligned with
// table.Columns in the record model's value types. It reads what a
// consumer following the package's contract sees: tombstones and keys
// older than the table's barrier are absent. It is a verification helper
// (SCAN over the table's keys).
func (s *Sink) Rows(ctx context.Context, table *pipeline.Table) ([][]any, error) {
	var out [][]any
	err := s.Scan(ctx, table, func(row []any) error { out = append(out, row); return nil })
	return out, err
}

// Scan streams the rows Rows returns, one SCAN page at a time
// (verify.Scanner); a key SCAN returns twice (while Redis rehashes) is
// read twice. It holds the sink's lock for the whole read, so writes wait
// for it; row must not call back into the sink.
func (s *Sink) Scan(ctx context.Context, table *pipeline.Table, row func([]any) error) error {
	return s.read(ctx, table, nil, row)
}

// RowsByKey returns the live rows among keys as Rows returns rows
// (verify.KeyReader): one pipelined read of the keys' entries. It takes
// the sink's lock, so it waits for a write in progress.
func (s *Sink) RowsByKey(ctx context.Context, table *pipeline.Table, keys [][]any) ([][]any, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	var out [][]any
	err := s.read(ctx, table, keys, func(row []any) error { out = append(out, row); return nil })
	return out, err
}

// read reads the live rows of table among keys for fn, all of them (SCAN)
// when keys is nil.
func (s *Sink) read(ctx context.Context, table *pipeline.Table, keys [][]any, fn func([]any) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		return errors.New("redis sink: read before open")
	}
	ti := s.info(table)
	barrier, err := s.client.Get(ctx, ti.barrier).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return err
	}
	kind := "hash"
	if s.opts.Format == "json" {
		kind = "string"
	}
	if keys == nil {
		var cursor uint64
		for {
			page, next, err := s.client.ScanType(ctx, cursor, ti.pattern, scanCount, kind).Result()
			if err != nil {
				return err
			}
			if err := s.fetch(ctx, table, page, barrier, kind, fn); err != nil {
				return err
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	names := make([]string, 0, len(keys))
	img := make([]any, len(table.Columns))
	for _, key := range keys {
		if len(key) != len(table.KeyIdx) {
			return fmt.Errorf("table %s: a key of %d values for %d key columns", table.ID, len(key), len(table.KeyIdx))
		}
		for i, idx := range table.KeyIdx {
			img[idx] = key[i]
		}
		name, err := s.rowKey(table, ti, img)
		if err != nil {
			return err
		}
		names = append(names, name)
	}
	return s.fetch(ctx, table, names, barrier, kind, fn)
}

// fetch reads the named keys in one pipeline and hands the live rows
// (not tombstones, not below barrier) to fn.
func (s *Sink) fetch(ctx context.Context, table *pipeline.Table, names []string, barrier, kind string, fn func([]any) error) error {
	if len(names) == 0 {
		return nil
	}
	pipe := s.client.Pipeline()
	cmds := make([]goredis.Cmder, len(names))
	for i, k := range names {
		if kind == "hash" {
			cmds[i] = pipe.HGetAll(ctx, k)
		} else {
			cmds[i] = pipe.Get(ctx, k)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return err
	}
	for i, cmd := range cmds {
		if absent(cmd) {
			continue // a key asked for that the sink does not hold
		}
		v, deleted, vals, err := stored(cmd)
		if err != nil {
			return fmt.Errorf("key %s: %w", names[i], err)
		}
		if deleted || v < barrier {
			continue
		}
		row, err := decodeRow(table, vals)
		if err != nil {
			return fmt.Errorf("key %s: %w", names[i], err)
		}
		if err := fn(row); err != nil {
			return err
		}
	}
	return nil
}

// absent reports a read of a key that does not exist.
func absent(cmd goredis.Cmder) bool {
	if h, ok := cmd.(*goredis.MapStringStringCmd); ok {
		return h.Err() == nil && len(h.Val()) == 0
	}
	return errors.Is(cmd.Err(), goredis.Nil)
}

// stored reads a key's stored form (a hash's fields or a json document):
// its version, whether it is a tombstone, and its columns' texts.
func stored(cmd goredis.Cmder) (version string, deleted bool, vals map[string]string, err error) {
	if h, ok := cmd.(*goredis.MapStringStringCmd); ok {
		vals = h.Val()
		version, ok = vals[fieldVersion]
		if !ok {
			return "", false, nil, errors.New("no _v field")
		}
		return version, vals[fieldDeleted] != "", vals, nil
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(cmd.(*goredis.StringCmd).Val()), &doc); err != nil {
		return "", false, nil, fmt.Errorf("document: %w", err)
	}
	version, _ = doc[fieldVersion].(string)
	if version == "" {
		return "", false, nil, errors.New("document without _v")
	}
	vals = make(map[string]string, len(doc))
	for k, v := range doc {
		switch x := v.(type) {
		case string:
			vals[k] = x
		case nil:
		default:
			if k != fieldDeleted {
				return "", false, nil, fmt.Errorf("member %s is %T, want a string or null", k, v)
			}
		}
	}
	return version, doc[fieldDeleted] == true, vals, nil
}

// decodeRow reads a stored key's column texts back into a row of table.
func decodeRow(table *pipeline.Table, vals map[string]string) ([]any, error) {
	row := make([]any, len(table.Columns))
	for i := range table.Columns {
		c := &table.Columns[i]
		text, ok := vals[c.Name]
		if !ok {
			continue
		}
		v, err := textform.Decode(c, text)
		if err != nil {
			return nil, err
		}
		row[i] = v
	}
	return row, nil
}

package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Rows returns the live rows of a source table, ordered by key, with
// values aligned with table.Columns in the record model's value types. It
// reads what a consumer following the package's contract sees: tombstones
// and keys older than the table's barrier are absent. It is a
// verification helper (SCAN over the table's keys).
func (s *Sink) Rows(ctx context.Context, table *pipeline.Table) ([][]any, error) {
	return s.rows(ctx, table, nil)
}

// RowsByKey returns the live rows among keys as Rows returns rows
// (verify.KeyReader): one pipelined read of the keys' entries. It takes
// the sink's lock, so it waits for a write in progress.
func (s *Sink) RowsByKey(ctx context.Context, table *pipeline.Table, keys [][]any) ([][]any, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	return s.rows(ctx, table, keys)
}

// rows reads the live rows of table among keys, all of them (SCAN) when
// keys is nil.
func (s *Sink) rows(ctx context.Context, table *pipeline.Table, keys [][]any) ([][]any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		return nil, errors.New("redis sink: read before open")
	}
	ti := s.info(table)
	barrier, err := s.client.Get(ctx, ti.barrier).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	kind := "hash"
	if s.opts.Format == "json" {
		kind = "string"
	}
	var names []string
	if keys == nil {
		if names, err = s.scanKeys(ctx, ti.pattern, kind); err != nil {
			return nil, err
		}
	}
	img := make([]any, len(table.Columns))
	for _, key := range keys {
		if len(key) != len(table.KeyIdx) {
			return nil, fmt.Errorf("table %s: a key of %d values for %d key columns", table.ID, len(key), len(table.KeyIdx))
		}
		for i, idx := range table.KeyIdx {
			img[idx] = key[i]
		}
		name, err := s.rowKey(table, ti, img)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
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
	if len(names) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
			return nil, err
		}
	}
	var out [][]any
	for i, cmd := range cmds {
		if absent(cmd) {
			continue // a key asked for that the sink does not hold
		}
		v, deleted, vals, err := stored(cmd)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", names[i], err)
		}
		if deleted || v < barrier {
			continue
		}
		row, err := decodeRow(table, vals)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", names[i], err)
		}
		out = append(out, row)
	}
	return out, nil
}

// scanKeys lists the keys matching pattern of kind, sorted.
func (s *Sink) scanKeys(ctx context.Context, pattern, kind string) ([]string, error) {
	var keys []string
	var cursor uint64
	for {
		page, next, err := s.client.ScanType(ctx, cursor, pattern, scanCount, kind).Result()
		if err != nil {
			return nil, err
		}
		keys = append(keys, page...)
		if next == 0 {
			break
		}
		cursor = next
	}
	sort.Strings(keys)
	return keys, nil
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
		v, err := decodeValue(c, text)
		if err != nil {
			return nil, err
		}
		row[i] = v
	}
	return row, nil
}

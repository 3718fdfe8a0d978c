package upsert

import (
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

func TestSplitBulk(t *testing.T) {
	tb := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "t"}, Columns: []pipeline.Column{{Name: "id"}, {Name: "v"}}, KeyIdx: []int{0}}
	other := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "u"}, Columns: tb.Columns, KeyIdx: []int{0}}
	rec := func(op pipeline.Op, table *pipeline.Table, id int64) pipeline.Record {
		r := pipeline.Record{Op: op, Table: table, Version: pipeline.Version{uint64(id)}}
		if op != pipeline.OpDelete && op != pipeline.OpHeartbeat && op != pipeline.OpTruncate {
			r.After = []any{id, "x"}
		}
		if op == pipeline.OpHeartbeat {
			r.Table = nil
		}
		return r
	}
	ops := func(rs []pipeline.Record) (out []pipeline.Op) {
		for _, r := range rs {
			out = append(out, r.Op)
		}
		return out
	}
	for _, c := range []struct {
		name       string
		in         []pipeline.Record
		bulk, rest int // lengths; bulk -1: nil
	}{
		{"inserts only: bulk whole", []pipeline.Record{rec(pipeline.OpRead, tb, 1), rec(pipeline.OpInsert, tb, 2)}, 2, 0},
		{"reads beside a few changes: split", []pipeline.Record{rec(pipeline.OpRead, tb, 1), rec(pipeline.OpUpdate, tb, 2),
			rec(pipeline.OpRead, tb, 3), rec(pipeline.OpHeartbeat, nil, 0), rec(pipeline.OpDelete, tb, 4), rec(pipeline.OpRead, tb, 5)}, 3, 3},
		{"more changes than inserts: one path", []pipeline.Record{rec(pipeline.OpRead, tb, 1), rec(pipeline.OpUpdate, tb, 2), rec(pipeline.OpDelete, tb, 3)}, -1, 3},
		{"a truncate: one path", []pipeline.Record{rec(pipeline.OpRead, tb, 1), rec(pipeline.OpRead, tb, 2), rec(pipeline.OpTruncate, tb, 3)}, -1, 3},
		{"two tables: one path", []pipeline.Record{rec(pipeline.OpRead, tb, 1), rec(pipeline.OpRead, tb, 2), rec(pipeline.OpUpdate, other, 3)}, -1, 3},
		{"changes only: one path", []pipeline.Record{rec(pipeline.OpUpdate, tb, 1)}, -1, 1},
	} {
		bulk, rest := SplitBulk(c.in)
		if c.bulk == -1 {
			if bulk != nil || len(rest) != len(c.in) {
				t.Errorf("%s: bulk %v rest %v, want no split", c.name, ops(bulk), ops(rest))
			}
			continue
		}
		if len(bulk) != c.bulk || len(rest) != c.rest {
			t.Errorf("%s: bulk %v rest %v, want %d and %d", c.name, ops(bulk), ops(rest), c.bulk, c.rest)
			continue
		}
		// Each part keeps the records' order.
		for _, part := range [][]pipeline.Record{bulk, rest} {
			for i := 1; i < len(part); i++ {
				if part[i].Op != pipeline.OpHeartbeat && part[i-1].Op != pipeline.OpHeartbeat && part[i].Version.Less(part[i-1].Version) {
					t.Errorf("%s: a part out of order: %v", c.name, ops(part))
				}
			}
		}
	}
}

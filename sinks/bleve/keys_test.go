package bleve

import (
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/verify"
)

var (
	_ verify.KeyReader = (*Sink)(nil)
	_ verify.Scanner   = (*Sink)(nil)
)

// pairs has a compound key: its document ids have two key parts.
var pairs = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "pairs"},
	Columns: []pipeline.Column{
		{Name: "region", Type: pipeline.TypeString, Key: true},
		{Name: "n", Type: pipeline.TypeInt32, Key: true},
		{Name: "label", Type: pipeline.TypeString, Nullable: true},
	},
	KeyIdx: []int{0, 1}, Generation: 1,
}

func pair(op pipeline.Op, v uint64, n int64, label any) pipeline.Record {
	r := pipeline.Record{Op: op, Table: pairs, Version: ver(v)}
	img := []any{fmt.Sprintf("r%d", n%3), n, label}
	if op == pipeline.OpDelete {
		img[2], r.Before = nil, img
	} else {
		r.After = img
	}
	return r
}

// TestRowsByKeyDuringWrites reads chosen keys while another goroutine
// writes batches (updates, deletes, inserts) to the same open sink: every
// read succeeds with well-formed rows of the keys asked, the keys never
// deleted are always there, and once the writes stop the reads agree with
// Rows.
func TestRowsByKeyDuringWrites(t *testing.T) {
	s := openSink(t, Options{})
	if rows, err := s.RowsByKey(ctx, people, [][]any{{int64(1)}}); err != nil || len(rows) != 0 {
		t.Fatalf("RowsByKey before any write: %v, %v", rows, err)
	}
	var initial []pipeline.Record
	for id := int64(1); id <= 200; id++ {
		initial = append(initial, change(pipeline.OpInsert, 1, id, "initial", "bio"), pair(pipeline.OpInsert, 1, id, "initial"))
	}
	mustWrite(t, s, initial...)
	const batches = 20
	done := make(chan error, 1)
	go func() {
		for b := int64(1); b <= batches; b++ {
			v := uint64(b + 1)
			var recs []pipeline.Record
			for id := int64(1); id <= 100; id++ {
				name := fmt.Sprintf("v%d", b)
				recs = append(recs, change(pipeline.OpUpdate, v, id, name, "bio"), pair(pipeline.OpUpdate, v, id, name))
			}
			recs = append(recs, del(v, 100+b), pair(pipeline.OpDelete, v, 100+b, nil),
				change(pipeline.OpInsert, v, 1000+b, "new", nil), pair(pipeline.OpInsert, v, 1000+b, "new"))
			if err := s.Write(ctx, recs); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	peopleKeys := [][]any{{int64(-1)}}
	pairKeys := [][]any{{"r0", int64(-1)}, {"nowhere", int64(3)}}
	for id := int64(1); id <= 200; id++ {
		peopleKeys = append(peopleKeys, []any{id})
		pairKeys = append(pairKeys, []any{fmt.Sprintf("r%d", id%3), id})
	}
	for b := int64(1); b <= batches; b++ {
		peopleKeys = append(peopleKeys, []any{1000 + b})
		pairKeys = append(pairKeys, []any{fmt.Sprintf("r%d", (1000+b)%3), 1000 + b})
	}
	// label is the column every live row holds a string in.
	label := map[*pipeline.Table]int{people: 1, pairs: 2}
	read := func(table *pipeline.Table, keys [][]any) map[string][]any {
		t.Helper()
		rows, err := s.RowsByKey(ctx, table, keys)
		if err != nil {
			t.Fatalf("RowsByKey %s: %v", table.ID, err)
		}
		asked := map[string]bool{}
		for _, k := range keys {
			asked[sinktest.Key(k)] = true
		}
		got := map[string][]any{}
		for _, r := range rows {
			k := sinktest.RowKey(table, r)
			if len(r) != len(table.Columns) || !asked[k] || got[k] != nil {
				t.Fatalf("RowsByKey %s: row %v is malformed, not asked for or repeated", table.ID, r)
			}
			if _, ok := r[label[table]].(string); !ok {
				t.Fatalf("RowsByKey %s: row %v holds %T in column %d", table.ID, r, r[label[table]], label[table])
			}
			got[k] = r
		}
		for id := int64(1); id <= 100; id++ { // never deleted
			k := sinktest.Key([]any{id})
			if table == pairs {
				k = sinktest.Key([]any{fmt.Sprintf("r%d", id%3), id})
			}
			if got[k] == nil {
				t.Fatalf("RowsByKey %s: live key %s is missing", table.ID, k)
			}
		}
		return got
	}
	reads := 0
	for running := true; running; reads++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
		}
		read(people, peopleKeys)
		read(pairs, pairKeys)
	}
	t.Logf("%d reads during %d writes", reads, batches)
	for _, c := range []struct {
		table *pipeline.Table
		keys  [][]any
	}{{people, peopleKeys}, {pairs, pairKeys}} {
		if d := sinktest.Diff(c.table, rows(t, s, c.table), read(c.table, c.keys)); d != "" {
			t.Fatalf("%s: RowsByKey differs from Rows:\n%s", c.table.ID, d)
		}
	}
}

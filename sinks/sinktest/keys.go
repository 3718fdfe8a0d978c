package sinktest

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// checkKeyReads asserts that a sink that is a verify.KeyReader returns, for
// chosen keys, exactly the model's live rows among them: live keys, keys
// whose rows were deleted or truncated, and keys never written, asked in
// small groups and all at once.
func checkKeyReads(t *testing.T, s pipeline.Sink, m *Model, when string) {
	t.Helper()
	kr, ok := s.(verify.KeyReader)
	if !ok {
		return
	}
	absent := map[*pipeline.Table][][]any{
		Accounts: {{int64(-1)}, {int64(1 << 40)}},
		Items:    {{"nowhere", int64(-7)}, {"", int64(0)}},
	}
	for _, table := range []*pipeline.Table{Accounts, Items} {
		keys := append(m.Keys(table), absent[table]...)
		live := m.Live(table)
		for _, size := range []int{1, 7, len(keys)} {
			for from := 0; from < len(keys); from += size {
				group := keys[from:min(from+size, len(keys))]
				want := map[string][]any{}
				for _, k := range group {
					if row, ok := live[verify.Key(k)]; ok {
						want[verify.Key(k)] = row
					}
				}
				rows, err := kr.RowsByKey(context.Background(), table, group)
				if err != nil {
					t.Fatalf("%s: RowsByKey %s (%d keys): %v", when, table.ID, len(group), err)
				}
				got := map[string][]any{}
				for _, row := range rows {
					got[RowKey(table, row)] = row
				}
				if diff := Diff(table, want, got); diff != "" {
					t.Fatalf("%s: RowsByKey %s (%d keys from %d) differs from the model:\n%s", when, table.ID, len(group), from, diff)
				}
			}
		}
	}
}

// KeyReadsDuringWrites reads chosen keys of Accounts and Items (a
// composite key) from s, a verify.KeyReader opened on an empty target,
// while another goroutine writes batches of updates, deletes and inserts
// to it: every read succeeds with well-formed rows of the keys asked, each
// once; keys never deleted are always there; once the writes stop, the
// reads agree with what read (the harness's full read) returns.
func KeyReadsDuringWrites(t *testing.T, s pipeline.Sink, batches int, read func(*pipeline.Table) map[string][]any) {
	t.Helper()
	kr, ok := s.(verify.KeyReader)
	if !ok {
		t.Fatalf("%T is not a verify.KeyReader", s)
	}
	ctx := context.Background()
	if rows, err := kr.RowsByKey(ctx, Accounts, [][]any{{int64(1)}}); err != nil || len(rows) != 0 {
		t.Fatalf("RowsByKey before any write: %v, %v", rows, err)
	}
	item := func(n int64, price float64) []any {
		return []any{fmt.Sprintf("r%d", n%3), n, price, nil, nil, nil, nil}
	}
	at := func(op pipeline.Op, table *pipeline.Table, v uint64, row []any) pipeline.Record {
		r := pipeline.Record{Op: op, Table: table, Version: pipeline.Version{0, v, 0, 0}}
		if op == pipeline.OpDelete {
			r.Before = row
		} else {
			r.After = row
		}
		return r
	}
	var initial []pipeline.Record
	for id := int64(1); id <= 200; id++ {
		initial = append(initial, at(pipeline.OpInsert, Accounts, 1, account(id, "initial", id, nil)),
			at(pipeline.OpInsert, Items, 1, item(id, 1)))
	}
	write(t, s, initial)
	done := make(chan error, 1)
	go func() {
		for b := int64(1); b <= int64(batches); b++ {
			v := uint64(b + 1)
			var recs []pipeline.Record
			for id := int64(1); id <= 100; id++ {
				recs = append(recs, at(pipeline.OpUpdate, Accounts, v, account(id, fmt.Sprintf("v%d", b), id, nil)),
					at(pipeline.OpUpdate, Items, v, item(id, float64(b))))
			}
			recs = append(recs, at(pipeline.OpDelete, Accounts, v, account(100+b, "", 0, nil)), at(pipeline.OpDelete, Items, v, item(100+b, 0)),
				at(pipeline.OpInsert, Accounts, v, account(1000+b, "new", 1, nil)), at(pipeline.OpInsert, Items, v, item(1000+b, 2)))
			if err := s.Write(ctx, recs); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	keys := map[*pipeline.Table][][]any{
		Accounts: {{int64(-1)}},
		Items:    {{"r0", int64(-1)}, {"nowhere", int64(3)}},
	}
	add := func(id int64) {
		keys[Accounts] = append(keys[Accounts], []any{id})
		keys[Items] = append(keys[Items], []any{fmt.Sprintf("r%d", id%3), id})
	}
	for id := int64(1); id <= 200; id++ {
		add(id)
	}
	for b := int64(1); b <= int64(batches); b++ {
		add(1000 + b)
	}
	// value is a column every live row holds a value of this type in.
	value := map[*pipeline.Table]struct {
		col  int
		kind string
	}{Accounts: {1, "string"}, Items: {2, "float64"}}
	byKey := func(table *pipeline.Table) map[string][]any {
		t.Helper()
		rows, err := kr.RowsByKey(ctx, table, keys[table])
		if err != nil {
			t.Fatalf("RowsByKey %s: %v", table.ID, err)
		}
		asked := map[string]bool{}
		for _, k := range keys[table] {
			asked[Key(k)] = true
		}
		got := map[string][]any{}
		for _, r := range rows {
			k := RowKey(table, r)
			if len(r) != len(table.Columns) || !asked[k] || got[k] != nil {
				t.Fatalf("RowsByKey %s: row %v is malformed, not asked for or repeated", table.ID, r)
			}
			if kind := fmt.Sprintf("%T", r[value[table].col]); kind != value[table].kind {
				t.Fatalf("RowsByKey %s: row %v holds %s in column %d", table.ID, r, kind, value[table].col)
			}
			got[k] = r
		}
		for id := int64(1); id <= 100; id++ { // never deleted
			k := Key([]any{id})
			if table == Items {
				k = Key([]any{fmt.Sprintf("r%d", id%3), id})
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
		byKey(Accounts)
		byKey(Items)
	}
	t.Logf("%d reads during %d writes", reads, batches)
	for _, table := range []*pipeline.Table{Accounts, Items} {
		if d := Diff(table, read(table), byKey(table)); d != "" {
			t.Fatalf("%s: RowsByKey differs from a full read:\n%s", table.ID, d)
		}
	}
}

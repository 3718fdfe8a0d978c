package sinktest

import (
	"context"
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

package pipeline

import (
	"fmt"
	"math/big"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// TestEstimateSizeTracksTheHeap holds 20,000 records of typical shapes
// and compares the heap they take with the sum of their estimates: the
// in-flight cap (Invariant 6) counts estimates, so they must be close to
// what the records really hold, and never much below it.
func TestEstimateSizeTracksTheHeap(t *testing.T) {
	tbl := &Table{ID: TableID{Schema: "public", Table: "t"}}
	shapes := map[string]func(i int) Record{
		"narrow": func(i int) Record {
			return Record{Op: OpInsert, Table: tbl, After: []any{int64(i + 1000), fmt.Sprintf("name-%08d", i), float64(i) / 3}}
		},
		"wide": func(i int) Record {
			return Record{Op: OpUpdate, Table: tbl,
				Before: []any{int64(i + 1000), nil, Unchanged{}},
				After: []any{int64(i + 1000), strings.Repeat("x", 40+i%80), Decimal{Unscaled: big.NewInt(int64(i) * 1_000_003), Scale: 2},
					Timestamp{Micros: int64(i)}, []byte(fmt.Sprintf("%064d", i)), JSON(`{"k":` + fmt.Sprint(i) + `}`),
					[]any{int64(i), int64(i + 1), nil}, UUID{byte(i)}, true},
				Pos: Position(fmt.Sprintf("0/%X", i))}
		},
	}
	for name, build := range shapes {
		t.Run(name, func(t *testing.T) {
			const n = 20_000
			recs := make([]Record, n)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			est := 0
			for i := range recs {
				recs[i] = build(i)
				est += EstimateSize(&recs[i])
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			// The records' slice itself is allocated before the first
			// reading: add its size to what the values took.
			held := float64(after.HeapAlloc-before.HeapAlloc) + float64(n)*float64(unsafe.Sizeof(Record{}))
			ratio := float64(est) / held
			t.Logf("%s: estimate %d B, heap %.0f B, ratio %.2f", name, est, held, ratio)
			if ratio < 0.85 || ratio > 1.5 {
				t.Errorf("estimate/heap = %.2f, want within [0.85, 1.5]", ratio)
			}
			runtime.KeepAlive(recs)
		})
	}
}

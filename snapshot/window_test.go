package snapshot

import (
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// A transaction at or above a read's first invisible id counts as hidden
// only when it committed below the low watermark, and "above" follows
// the server's circular order of 32-bit ids across the wrap.
func TestCommitRingAtOrAbove(t *testing.T) {
	v := func(lsn uint64) pipeline.Version { return pipeline.Version{0, lsn, 0, 2} }
	low := pipeline.Version{0, 100, 0, 1}
	cases := []struct {
		name    string
		txid    uint64
		at      pipeline.Version
		from    uint64
		want    bool
		comment string
	}{
		{"equal to xmax, before low", 728, v(90), 728, true, ""},
		{"above xmax, before low", 730, v(90), 728, true, ""},
		{"below xmax", 727, v(90), 728, false, "visible to the read"},
		{"at xmax, after low", 728, v(100), 728, false, "in the window"},
		{"past the wrap", 5, v(90), 0xfffffff0, true, "5 follows 2^32-16"},
		{"before the wrap", 0xffffffe0, v(90), 10, false, "2^32-32 precedes 10"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r commitRing
			r.add(c.txid, c.at)
			id, ok := r.atOrAbove(c.from, low)
			if ok != c.want || ok && id != c.txid {
				t.Fatalf("atOrAbove(%d) = %d, %v; want %v (%s)", c.from, id, ok, c.want, c.comment)
			}
		})
	}
}

// A window whose chunk is read keeps every touched key until the set
// outgrows the chunk, then only the chunk's: the set stays bounded by the
// chunk's size however many keys the stream touches (Invariant 6), and
// no touched key of a chunk row is lost either way.
func TestWindowTouchedStaysBounded(t *testing.T) {
	tb := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "t"},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}}, KeyIdx: []int{0}}
	var rows [][]any
	for i := range 10 {
		rows = append(rows, []any{int64(i)})
	}
	w := &window{touched: map[string]struct{}{}}
	w.setChunk(&Chunk{Table: tb, Rows: rows})
	key := func(i int64) string { return verify.RowKey(tb, []any{i}) }
	w.touch(changeKeys{new: key(3)})
	if w.keys != nil {
		t.Fatal("the chunk's keys were made for one touched key")
	}
	for i := int64(100); i < 5100; i++ {
		w.touch(changeKeys{new: key(i)})
		if len(w.touched) > minTouched+1 {
			t.Fatalf("after %d touches the window holds %d keys", i-99, len(w.touched))
		}
	}
	w.touch(changeKeys{old: key(5), new: key(7)})
	for _, i := range []int64{3, 5, 7} {
		if _, ok := w.touched[key(i)]; !ok {
			t.Fatalf("chunk key %d touched in the window was forgotten", i)
		}
	}
	if len(w.touched) != 3 {
		t.Fatalf("the window keeps %d keys, want the chunk's 3 touched ones", len(w.touched))
	}
}

// adapt follows the read time within the row bounds, and never past the
// rows of MaxChunkBytes at the last chunk's bytes per row (Invariant 6).
func TestAdaptBoundsChunkBytes(t *testing.T) {
	target := 500 * time.Millisecond
	for _, c := range []struct {
		limit int
		read  chunkRead
		want  int
	}{
		{4096, chunkRead{took: 100 * time.Millisecond, rows: 4096, bytes: 4096 * 100}, 8192},     // fast: doubled
		{4096, chunkRead{took: 2 * time.Second, rows: 4096, bytes: 4096 * 100}, 2048},            // slow: halved
		{4096, chunkRead{took: 400 * time.Millisecond, rows: 4096, bytes: 4096 * 100}, 4096},     // near the target
		{65536, chunkRead{took: 100 * time.Millisecond, rows: 65536, bytes: 65536 * 100}, 65536}, // the row bound
		{32768, chunkRead{took: 100 * time.Millisecond, rows: 32768, bytes: 32768 * 1000}, 8388}, // 8 MiB of 1,000-byte rows
		{4096, chunkRead{took: 100 * time.Millisecond, rows: 4096, bytes: 4096 << 20}, 64},       // 1 MiB rows: the floor
		{4096, chunkRead{took: 100 * time.Millisecond}, 8192},                                    // an empty chunk
	} {
		if got := adapt(c.limit, c.read, target, 65536, 8<<20); got != c.want {
			t.Errorf("adapt(%d, %+v) = %d, want %d", c.limit, c.read, got, c.want)
		}
	}
}

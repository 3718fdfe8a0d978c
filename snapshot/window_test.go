package snapshot

import (
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
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

package state

import (
	"bytes"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A write that takes the state past its cap is a fatal error naming the
// operator, the size and the setting; every write's size reaches Sized.
func TestAStatePastItsCapStopsThePipeline(t *testing.T) {
	var sizes []int64
	st, err := Open(Spec{What: "window analytics.revenue", Dir: t.TempDir(), File: "s.db", Spaces: []Space{{Name: "rows"}, {Name: "meta"}},
		Meta: "meta", MaxBytes: 256 << 10, Setting: "transforms[0].window.max_state_bytes", Sized: func(n int64) { sizes = append(sizes, n) }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Begin(false, []byte("def")); err != nil {
		t.Fatal(err)
	}
	write := func(n int) error {
		err := st.DB.Update(func(tx *bbolt.Tx) error {
			b := tx.Bucket([]byte("rows"))
			for i := range n {
				if err := b.Put([]byte(strings.Repeat("k", 8)+string(rune('a'+i%26))+strings.Repeat("x", i)), bytes.Repeat([]byte{1}, 1000)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Written()
		return err
	}
	if err := write(10); err != nil {
		t.Fatalf("a small state: %v", err)
	}
	err = write(1000)
	if err == nil || !pipeline.IsFatal(err) {
		t.Fatalf("a state past its cap: %v (fatal: %v)", err, pipeline.IsFatal(err))
	}
	for _, want := range []string{"window analytics.revenue", "past transforms[0].window.max_state_bytes = 0.2 MiB", "raise transforms[0].window.max_state_bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if len(sizes) != 2 || sizes[1] <= 256<<10 {
		t.Fatalf("sizes told: %v", sizes)
	}
}

package window

import (
	"reflect"
	"testing"
	"time"
)

func TestAssign(t *testing.T) {
	min := time.Minute.Microseconds()
	for _, c := range []struct {
		spec Spec
		t    int64
		want []Bounds
	}{
		{Tumbling(time.Minute), 0, []Bounds{{0, min}}},
		{Tumbling(time.Minute), min - 1, []Bounds{{0, min}}},
		// An event exactly at a window's end belongs to the next window.
		{Tumbling(time.Minute), min, []Bounds{{min, 2 * min}}},
		{Tumbling(time.Minute), -1, []Bounds{{-min, 0}}},
		{Spec{Size: 3 * time.Minute, Advance: time.Minute}, 150 * 1e6, []Bounds{{0, 3 * min}, {min, 4 * min}, {2 * min, 5 * min}}},
		{Spec{Size: 3 * time.Minute, Advance: time.Minute}, 2*min - 1, []Bounds{{-min, 2 * min}, {0, 3 * min}, {min, 4 * min}}},
		{Spec{Size: 3 * time.Minute, Advance: time.Minute}, 2 * min, []Bounds{{0, 3 * min}, {min, 4 * min}, {2 * min, 5 * min}}},
		{Spec{Size: 90 * time.Second, Advance: time.Minute}, 70 * 1e6, []Bounds{{0, 90e6}, {min, min + 90e6}}},
		{Spec{Size: 90 * time.Second, Advance: time.Minute}, 100 * 1e6, []Bounds{{min, min + 90e6}}},
		{Spec{Size: 90 * time.Second, Advance: time.Minute}, 80 * 1e6, []Bounds{{0, 90e6}, {min, min + 90e6}}},
	} {
		if got := c.spec.Assign(c.t, nil); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v at %d: %v, want %v", c.spec, c.t, got, c.want)
		}
	}
	if (Spec{Size: time.Minute, Advance: 2 * time.Minute}).Check() == nil || (Spec{}).Check() == nil {
		t.Error("a bad spec passed its check")
	}
}

package pipeline

import (
	"fmt"
	"reflect"
	"testing"
)

// pos and order are a test source's positions and their order.
func pos(n int) Position { return Position(fmt.Sprintf(`{"n":%d}`, n)) }

func order(p, mark Position) bool {
	var a, b int
	fmt.Sscanf(string(p), `{"n":%d}`, &a)
	fmt.Sscanf(string(mark), `{"n":%d}`, &b)
	return a <= b
}

func TestAppliedKnowsReplaysAcrossGenerations(t *testing.T) {
	// The newest applied: the third change (index 4) of transaction 7.
	a := Applied{Version: Version{1, 6000, 30, 4}, Pos: pos(70), TxID: 7}
	for _, c := range []struct {
		name  string
		r     Record
		order PositionOrder
		want  bool
	}{
		{"a same-server replay", Record{Version: Version{1, 5000, 0, 2}}, nil, true},
		{"a new change", Record{Version: Version{1, 7000, 0, 2}}, order, false},
		{"an earlier transaction from another server", Record{Version: Version{2, 100, 9, 2}, TxID: 6, Pos: pos(60)}, order, true},
		{"the applied change itself", Record{Version: Version{2, 100, 20, 4}, TxID: 7, Pos: pos(70)}, order, true},
		{"the rest of its transaction", Record{Version: Version{2, 100, 20, 5}, TxID: 7, Pos: pos(70)}, order, false},
		{"a later transaction", Record{Version: Version{2, 100, 40, 2}, TxID: 8, Pos: pos(80)}, order, false},
		{"no order", Record{Version: Version{2, 100, 9, 2}, TxID: 6, Pos: pos(60)}, nil, false},
		{"no position", Record{Version: Version{2, 100, 9, 2}, TxID: 6}, order, false},
	} {
		if got := a.Replayed(&c.r, c.order); got != c.want {
			t.Errorf("%s: Replayed = %v, want %v", c.name, got, c.want)
		}
	}
	if got := (Applied{Version: Version{1, 6000, 30, 4}}).Replayed(&Record{Version: Version{2, 1, 0, 2}, Pos: pos(1)}, order); got {
		t.Error("a change of a later generation taken for a replay with no applied position to compare")
	}
}

// Before: what a stage kept of an earlier change (a late change, a
// move) may go once no replay can bring its change again.
func TestAppliedBeforeAcrossGenerations(t *testing.T) {
	// The kept change: index 4 of transaction 7, at position 70.
	a := Applied{Version: Version{1, 6000, 30, 4}, Pos: pos(70), TxID: 7}
	for _, c := range []struct {
		name  string
		r     Record
		order PositionOrder
		want  bool
	}{
		{"a later change of its generation", Record{Version: Version{1, 7000, 0, 2}}, order, true},
		{"an earlier change of its generation", Record{Version: Version{1, 5000, 0, 2}}, order, false},
		{"a change of an earlier generation", Record{Version: Version{0, 9000, 0, 2}}, order, false},
		{"a later transaction on another server", Record{Version: Version{2, 100, 40, 2}, TxID: 8, Pos: pos(80)}, order, true},
		{"its own replay", Record{Version: Version{2, 100, 20, 4}, TxID: 7, Pos: pos(70)}, order, false},
		{"the rest of its transaction", Record{Version: Version{2, 100, 20, 5}, TxID: 7, Pos: pos(70)}, order, true},
		{"an earlier transaction's replay", Record{Version: Version{2, 100, 9, 2}, TxID: 6, Pos: pos(60)}, order, false},
		{"no position", Record{Version: Version{2, 100, 40, 2}, TxID: 8}, order, false},
		{"no order", Record{Version: Version{2, 100, 9, 2}, TxID: 6, Pos: pos(60)}, nil, true},
	} {
		if got := a.Before(&c.r, c.order); got != c.want {
			t.Errorf("%s: Before = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestAppliedStoredForm(t *testing.T) {
	for _, a := range []Applied{
		{},
		{Version: Version{3, 4, 5, 6}},
		{Version: Version{3, 4, 5, 6}, TxID: 1 << 40, Pos: Position(`{"gtid":"0-1-42"}`)},
	} {
		got, err := ParseApplied(a.AppendBinary(nil))
		if err != nil || !reflect.DeepEqual(got, a) {
			t.Errorf("%+v read back as %+v (%v)", a, got, err)
		}
	}
	// The form stages stored before positions: a version alone.
	v := Version{9, 8, 7, 6}
	b := (Applied{Version: v}).AppendBinary(nil)[:32]
	if got, err := ParseApplied(b); err != nil || !reflect.DeepEqual(got, Applied{Version: v}) {
		t.Errorf("a bare version read as %+v (%v)", got, err)
	}
	if _, err := ParseApplied(b[:10]); err == nil {
		t.Error("10 bytes read as an applied change")
	}
}

package state

import (
	"cmp"
	"testing"
)

// The floor is the least value of the last covered batch and of every
// batch after it; batches without a value neither set nor hold it.
func TestFloorFollowsCheckpoints(t *testing.T) {
	f := Floor[int]{Less: func(a, b int) bool { return cmp.Less(a, b) }}
	if _, ok := f.Note(10, true); ok { // batch 1
		t.Fatal("a floor before any checkpoint")
	}
	f.Note(0, false) // batch 2: no value
	f.Note(30, true) // batch 3
	f.Note(20, true) // batch 4: lower than batch 3 (a replay may carry it)
	f.Checkpointed(2)
	if got, ok := f.Note(0, false); !ok || got != 10 { // batch 5
		t.Fatalf("covered through batch 2: floor %d (%v), want batch 1's 10", got, ok)
	}
	f.Checkpointed(3)
	if got, _ := f.Note(0, false); got != 20 {
		t.Fatalf("covered through batch 3: floor %d, want 20 (batch 4 is not covered)", got)
	}
	f.Checkpointed(6)
	if got, _ := f.Note(40, true); got != 20 {
		t.Fatalf("covered through batch 6: floor %d, want batch 4's 20 (the last covered batch with a value)", got)
	}
	f.Checkpointed(7)
	if got, _ := f.Note(0, false); got != 40 {
		t.Fatalf("covered through batch 7: floor %d, want 40", got)
	}
}

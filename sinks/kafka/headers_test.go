package kafka

import (
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Every op's header is its String form, shared rather than allocated per
// record.
func TestOpHeadersAreSharedAndExact(t *testing.T) {
	for op := pipeline.OpInsert; op <= pipeline.OpHeartbeat; op++ {
		if got := string(opBytes(op)); got != op.String() {
			t.Errorf("op %d header %q, want %q", op, got, op.String())
		}
		if n := testing.AllocsPerRun(100, func() { _ = opBytes(op) }); n != 0 {
			t.Errorf("op %s: %v allocations per header, want 0", op, n)
		}
	}
	if got := string(opBytes(pipeline.Op(200))); got != pipeline.Op(200).String() {
		t.Errorf("unknown op header %q", got)
	}
}

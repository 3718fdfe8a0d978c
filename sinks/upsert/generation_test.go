package upsert

import (
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

func TestGenerationRaise(t *testing.T) {
	rec := func(op pipeline.Op, gen uint64) pipeline.Record {
		return pipeline.Record{Op: op, Version: pipeline.Version{gen, 9, 0, 2}}
	}
	batch := []pipeline.Record{rec(pipeline.OpInsert, 1), rec(pipeline.OpHeartbeat, 7), rec(pipeline.OpDelete, 3), rec(pipeline.OpUpdate, 2)}
	for _, c := range []struct {
		name string
		g    Generation
		recs []pipeline.Record
		want uint64
		ok   bool
	}{
		{"nothing recorded: even generation 0 is recorded", Generation{}, []pipeline.Record{rec(pipeline.OpInsert, 0)}, 0, true},
		{"the batch's highest data record, heartbeats ignored", Generation{}, batch, 3, true},
		{"above the recorded", Generation{Gen: 2, Held: true}, batch, 3, true},
		{"at the recorded", Generation{Gen: 3, Held: true}, batch, 0, false},
		{"below the recorded", Generation{Gen: 5, Held: true}, batch, 0, false},
		{"no data records", Generation{}, []pipeline.Record{rec(pipeline.OpHeartbeat, 4)}, 0, false},
	} {
		got, ok := c.g.Raise(c.recs)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: Raise = %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

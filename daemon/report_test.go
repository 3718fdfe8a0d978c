package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/dlq"
	"github.com/sluice-cdc/sluice/pipeline"
)

type loadedSource struct{ pipeline.Source }

func (loadedSource) Status() pipeline.SourceStatus {
	return pipeline.SourceStatus{Phase: "stream", Connected: true,
		Tables: []pipeline.TableStatus{{Table: "public.t", RowsDone: 10, RowsTotal: 10, Done: true}}}
}

type nopSink struct{}

func (nopSink) Open(context.Context) error                     { return nil }
func (nopSink) Write(context.Context, []pipeline.Record) error { return nil }
func (nopSink) Close(context.Context) error                    { return nil }

type nopStore struct{}

func (nopStore) Load(context.Context, string) (pipeline.Checkpoint, bool, error) {
	return pipeline.Checkpoint{}, false, nil
}
func (nopStore) Commit(context.Context, pipeline.Checkpoint) error { return nil }
func (nopStore) Close() error                                      { return nil }

// An initial load that has been read but that no checkpoint covers yet is
// still reported as the snapshot phase: a kill now redoes it.
func TestStatusKeepsSnapshotPhaseUntilTheLoadIsCheckpointed(t *testing.T) {
	src := loadedSource{}
	rt, err := pipeline.New(pipeline.Config{Pipeline: "p"}, src, []pipeline.NamedSink{{Name: "s", Sink: nopSink{}}}, nopStore{}, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := dlq.OpenFile(t.TempDir(), "p")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	r := Report("p", time.Now(), rt, src, q)
	if r.Source.Phase != "snapshot" || !r.LoadUncheckpointed {
		t.Fatalf("phase %q, load_uncheckpointed %v", r.Source.Phase, r.LoadUncheckpointed)
	}
}

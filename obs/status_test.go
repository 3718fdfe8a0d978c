package obs

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

func TestRenderStatus(t *testing.T) {
	r := StatusReport{
		Pipeline: "orders",
		State:    StateSnapshot,
		Source: pipeline.SourceStatus{
			Phase: "snapshot", Connected: true, LagBytes: 3 << 20,
			Tables: []pipeline.TableStatus{
				{Table: "public.orders", RowsDone: 5000, RowsTotal: 10000},
				{Table: "public.customers", RowsDone: 700, RowsTotal: 700, Done: true},
				{Table: "app.events", RowsDone: 120},
				{Table: "app.big", RowsDone: 12000, RowsTotal: 10000},
			},
		},
		LagSeconds:           2.5,
		LastCheckpoint:       time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		CheckpointAgeSeconds: 75,
		CheckpointSeq:        42,
		InFlightRecords:      120,
		InFlightBytes:        64 << 10,
		DLQDepth:             3,
		DLQOldestAgeSeconds:  3600,
		Sinks:                []SinkStatus{{Name: "clickhouse", RecordsWritten: 12345}},
		StartedAt:            time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC),
		Error:                "retrying: postgres://u:pw-secret@db/app refused",
	}
	var buf bytes.Buffer
	if err := RenderStatus(&buf, r); err != nil {
		t.Fatal(err)
	}
	want := `pipeline         orders
state            snapshot (started 2026-03-01T11:00:00Z)
source           connected, phase snapshot
lag              2.5s behind, 3.0 MiB of log unread
checkpoint       seq 42, 1m15s ago (2026-03-01T12:00:00Z)
in flight        120 records, 64.0 KiB
dead letters     3 (oldest 1h0m0s ago)
sink clickhouse  12345 records written, 0 pending
error            retrying: postgres://u:xxxxx@db/app refused

snapshot
  public.orders      [##########----------]  50%  5000/10000
  public.customers   [####################] 100%  700/700 done
  app.events         [????????????????????]    ?  120/?
  app.big            [###################-]  99%  12000/10000
`
	if got := buf.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestRenderStatusMinimal(t *testing.T) {
	var buf bytes.Buffer
	if err := RenderStatus(&buf, StatusReport{Pipeline: "p", State: StateStarting}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"checkpoint    none yet", "dead letters  0", "disconnected", "0.00s behind, 0 B"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "snapshot\n") {
		t.Errorf("empty snapshot section:\n%s", out)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("closed pipe") }

func TestRenderStatusWriteError(t *testing.T) {
	if err := RenderStatus(failWriter{}, StatusReport{}); err == nil {
		t.Fatal("write error not reported")
	}
}

// Incremental snapshots show their chunks, rate, ETA, filter and why a
// chunk keeps being read again, and the last error while they retry.
func TestRenderStatusIncremental(t *testing.T) {
	r := StatusReport{Pipeline: "shop", State: StateStreaming, Source: pipeline.SourceStatus{
		Phase: "stream", Connected: true, SnapshotError: "snapshot of public.items: read: lock timeout",
		Tables: []pipeline.TableStatus{
			{Table: "public.items", RowsDone: 2500, RowsTotal: 10000, Incremental: true, Chunks: 5, RowsPerSecond: 500, ETASeconds: 15},
			{Table: "public.orders", RowsDone: 80, RowsTotal: 80, Done: true, Incremental: true, Chunks: 1, Where: "id < 100"},
			{Table: "public.users", RowsDone: 0, RowsTotal: 50, Incremental: true, ReadingAgain: "schema changed"},
		}}}
	var buf bytes.Buffer
	if err := RenderStatus(&buf, r); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	for _, want := range []string{
		"public.items    [#####---------------]  25%  2500/10000  incremental, 5 chunks, 500 rows/s, ETA 15.0s\n",
		"public.orders   [####################] 100%  80/80 done  incremental, 1 chunks, where id < 100\n",
		"public.users    [--------------------]   0%  0/50  incremental, 0 chunks, chunk read again: schema changed\n",
		"last error (retrying): snapshot of public.items: read: lock timeout\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}

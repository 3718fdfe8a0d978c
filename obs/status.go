package obs

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Pipeline states reported in StatusReport.State.
const (
	StateStarting  = "starting"
	StateSnapshot  = "snapshot"
	StateStreaming = "streaming"
	// StateDegraded: a sink's writes have kept failing for longer than
	// runtime.degraded_after; Sinks names it, since when and why.
	StateDegraded = "degraded"
	StateDraining = "draining"
	StateStopped  = "stopped"
	StateFailed   = "failed"
)

// StatusReport is the /status document: the daemon fills it, `sluice
// status` renders it with RenderStatus. Ages are computed when the report is
// made.
type StatusReport struct {
	Pipeline string                `json:"pipeline"`
	State    string                `json:"state"`
	Source   pipeline.SourceStatus `json:"source"`
	// LagSeconds is how far the stream is behind the database (the
	// sluice_source_lag_seconds gauge); LagBytes is in Source.
	LagSeconds float64 `json:"lag_seconds"`

	LastCheckpoint       time.Time `json:"last_checkpoint,omitzero"`
	CheckpointAgeSeconds float64   `json:"checkpoint_age_seconds"`
	CheckpointSeq        uint64    `json:"checkpoint_seq"`

	InFlightRecords int64 `json:"in_flight_records"`
	InFlightBytes   int64 `json:"in_flight_bytes"`

	DLQDepth            int64   `json:"dlq_depth"`
	DLQOldestAgeSeconds float64 `json:"dlq_oldest_age_seconds"`

	// LoadUncheckpointed is set while the initial load has been read but
	// no checkpoint covers it yet: a kill now would redo the load.
	LoadUncheckpointed bool `json:"load_uncheckpointed,omitempty"`

	Sinks     []SinkStatus `json:"sinks,omitempty"`
	StartedAt time.Time    `json:"started_at"`
	Error     string       `json:"error,omitempty"`
}

// SinkStatus is one sink's progress.
type SinkStatus struct {
	Name           string `json:"name"`
	RecordsWritten int64  `json:"records_written"`
	// FailingSince is when the sink's current run of failed writes began
	// (absent while it writes); LastError is the latest failure.
	FailingSince time.Time `json:"failing_since,omitzero"`
	LastError    string    `json:"last_error,omitempty"`
	// BatchLimit is how many records its next write may hold (adaptive).
	BatchLimit int `json:"batch_limit,omitempty"`
	// Undrained counts records handed to it and not yet durable in it.
	Undrained int64 `json:"undrained"`
	// Holding counts the undrained records held for its quarantined
	// tables (runtime.quarantine: hold).
	Holding int64 `json:"holding,omitempty"`
	// Quarantined lists the tables it refused permanently: their records
	// go to the DLQ until a restart after the fix.
	Quarantined []QuarantinedTable `json:"quarantined,omitempty"`
}

// QuarantinedTable is a table a sink refused permanently.
type QuarantinedTable struct {
	Table  string    `json:"table"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
}

// barWidth is the number of cells in a snapshot progress bar.
const barWidth = 20

// RenderStatus writes a human view of r to w: state, per-table snapshot
// progress bars, stream lag, last checkpoint, in-flight load, DLQ and sinks.
// Error text is redacted. It returns the first write error.
func RenderStatus(w io.Writer, r StatusReport) error {
	ew := &errWriter{w: w}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, a...)) }

	row("pipeline", "%s", r.Pipeline)
	state := r.State
	if state == "" {
		state = "unknown"
	}
	if !r.StartedAt.IsZero() {
		state += " (started " + r.StartedAt.UTC().Format(time.RFC3339) + ")"
	}
	row("state", "%s", state)
	conn := "disconnected"
	if r.Source.Connected {
		conn = "connected"
	}
	if r.Source.Phase != "" {
		conn += ", phase " + r.Source.Phase
	}
	if r.LoadUncheckpointed {
		conn += " (load read, waiting for its first checkpoint: a kill now redoes it)"
	}
	row("source", "%s", conn)
	row("lag", "%s behind, %s of log unread", seconds(r.LagSeconds), bytesText(r.Source.LagBytes))
	if r.CheckpointSeq == 0 && r.LastCheckpoint.IsZero() {
		row("checkpoint", "none yet")
	} else {
		row("checkpoint", "seq %d, %s ago (%s)", r.CheckpointSeq, seconds(r.CheckpointAgeSeconds),
			r.LastCheckpoint.UTC().Format(time.RFC3339))
	}
	row("in flight", "%d records, %s", r.InFlightRecords, bytesText(r.InFlightBytes))
	if r.DLQDepth == 0 {
		row("dead letters", "0")
	} else {
		row("dead letters", "%d (oldest %s ago)", r.DLQDepth, seconds(r.DLQOldestAgeSeconds))
	}
	for _, s := range r.Sinks {
		line := fmt.Sprintf("%d records written, %d pending", s.RecordsWritten, s.Undrained)
		if s.BatchLimit > 0 {
			line += fmt.Sprintf(", writes of up to %d", s.BatchLimit)
		}
		if !s.FailingSince.IsZero() {
			line += fmt.Sprintf("; FAILING since %s: %s", s.FailingSince.UTC().Format(time.RFC3339), Redact(s.LastError))
		}
		row("sink "+s.Name, "%s", line)
		for _, q := range s.Quarantined {
			what := "its records go to the dead-letter queue; fix it, restart, then re-snapshot the table"
			if s.Holding > 0 {
				what = fmt.Sprintf("%d records held in the source's log, no checkpoint passes them; fix it and restart", s.Holding)
			}
			row("  quarantined", "%s since %s: %s (%s)", q.Table, q.Since.UTC().Format(time.RFC3339), Redact(q.Reason), what)
		}
	}
	if r.Error != "" {
		row("error", "%s", Redact(r.Error))
	}
	tw.Flush()

	if len(r.Source.Tables) > 0 {
		fmt.Fprintln(ew, "\nsnapshot")
		width := 0
		for _, t := range r.Source.Tables {
			width = max(width, len(t.Table))
		}
		for _, t := range r.Source.Tables {
			fmt.Fprintf(ew, "  %-*s   %s%s\n", width, t.Table, tableProgress(t), incrementalDetail(t))
		}
		if r.Source.SnapshotError != "" {
			fmt.Fprintf(ew, "  last error (retrying): %s\n", Redact(r.Source.SnapshotError))
		}
	}
	return ew.err
}

// incrementalDetail renders an incremental snapshot's chunks, rate, ETA,
// filter and why its chunk keeps being read again, if it does:
// "  incremental, 12 chunks, 5400 rows/s, ETA 2m0s".
func incrementalDetail(t pipeline.TableStatus) string {
	if !t.Incremental {
		return ""
	}
	out := fmt.Sprintf("  incremental, %d chunks", t.Chunks)
	if t.RowsPerSecond > 0 && !t.Done {
		out += fmt.Sprintf(", %.0f rows/s", t.RowsPerSecond)
	}
	if t.ETASeconds > 0 && !t.Done {
		out += ", ETA " + seconds(t.ETASeconds)
	}
	if t.Where != "" {
		out += ", where " + t.Where
	}
	if t.ReadingAgain != "" {
		out += ", chunk read again: " + t.ReadingAgain
	}
	return out
}

// tableProgress renders "[#####-----]  50%  5000/10000".
func tableProgress(t pipeline.TableStatus) string {
	switch {
	case t.Done:
		return fmt.Sprintf("[%s] 100%%  %d/%d done", strings.Repeat("#", barWidth), t.RowsDone, max(t.RowsTotal, t.RowsDone))
	case t.RowsTotal <= 0:
		return fmt.Sprintf("[%s]    ?  %d/?", strings.Repeat("?", barWidth), t.RowsDone)
	}
	frac := float64(t.RowsDone) / float64(t.RowsTotal)
	// Totals are estimates: an unfinished table never shows 100%.
	frac = min(max(frac, 0), 0.99)
	filled := int(frac * barWidth)
	return fmt.Sprintf("[%s%s] %3d%%  %d/%d", strings.Repeat("#", filled), strings.Repeat("-", barWidth-filled),
		int(frac*100), t.RowsDone, t.RowsTotal)
}

func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return fmt.Sprintf("%.2fs", s)
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", s)
	}
	return d.Round(time.Second).String()
}

func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

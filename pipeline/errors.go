package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// RecordError is the failure of one record of a batch.
type RecordError struct {
	Index int   // index into the records passed to Write
	Err   error // the target's error
	// Permanent errors (a document the target rejects) go to the DLQ
	// (Invariant 7); transient ones are retried with the batch.
	Permanent bool
}

// BatchError reports per-record failures of a Sink.Write. Records not listed
// are durable.
type BatchError struct {
	Failed []RecordError
}

func (e *BatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d record(s) failed", len(e.Failed))
	for i, f := range e.Failed {
		if i == 3 {
			b.WriteString("; …")
			break
		}
		fmt.Fprintf(&b, "; #%d: %v", f.Index, f.Err)
	}
	return b.String()
}

// Rejects is what Operator.Process returns, beside its output, when
// records of the batch could not be transformed and the operator's error
// policy sends them to the dead-letter queue: the output holds the rest,
// the runtime stores the rejected records (stage "transform:<operator>")
// before the output moves on, and they are acknowledged with their batch
// (Invariant 7).
type Rejects struct {
	Records []Rejected
}

// Rejected is one record an operator could not transform, as it came in.
type Rejected struct {
	Record Record
	Err    error
}

func (e *Rejects) Error() string {
	if len(e.Records) == 0 {
		return "no record rejected"
	}
	return fmt.Sprintf("%d record(s) rejected, the first: %v", len(e.Records), e.Records[0].Err)
}

type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
func (e fatalError) Unwrap() error { return e.err }

// Fatal marks err as one the runtime must not retry: the pipeline stops
// (without acknowledging anything not durable) and sluice exits non-zero.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return fatalError{err}
}

// IsFatal reports whether err was marked with Fatal.
func IsFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}

type restartError struct{ err error }

func (e restartError) Error() string { return e.err.Error() }
func (e restartError) Unwrap() error { return e.err }

// Restart marks a source's err as one that starting the pipeline again
// from its last checkpoint resolves, at once and by design: an initial
// load that gave way to a schema change waiting for its locks (the
// restart reads the rest in chunks). The runtime stops as for any error:
// the final checkpoint covers only what is durable, so nothing undurable
// is acknowledged (Invariant 1) and the restart reads it again; the
// daemon then starts the
// pipeline again in the same process instead of exiting.
func Restart(err error) error {
	if err == nil {
		return nil
	}
	return restartError{err}
}

// IsRestart reports whether err was marked with Restart.
func IsRestart(err error) bool {
	var r restartError
	return errors.As(err, &r)
}

// OpenError is a failure to start a part of the pipeline (preflight,
// privileges, a lost slot, an unreachable sink): the operator must act
// before a restart can help.
type OpenError struct {
	What string
	Err  error
}

func (e *OpenError) Error() string { return "open " + e.What + ": " + e.Err.Error() }
func (e *OpenError) Unwrap() error { return e.Err }

// UndrainedError is a stop whose drain did not finish: records read from
// the source were not yet durable in every sink when the drain deadline
// passed. Nothing is lost — the final checkpoint covers only what is
// durable (Invariant 1), so a restart reads them again — but the stop is
// not clean and sluice exits with its own code.
type UndrainedError struct {
	Records  int           // records not durable in every sink
	Deadline time.Duration // Config.ShutdownTimeout
	Sinks    []SinkHealth  // the sinks still holding undrained records
}

func (e *UndrainedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stopped with %d record(s) not durable in every sink after the %s drain deadline", e.Records, e.Deadline)
	for i, s := range e.Sinks {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%ssink %s holds %d undrained", sep, s.Name, s.Undrained)
		if s.Holding > 0 {
			tables := make([]string, len(s.Quarantined))
			for i, q := range s.Quarantined {
				tables[i] = q.Table.String()
			}
			fmt.Fprintf(&b, " (%d held for quarantined %s: fix the sink, then restart)", s.Holding, strings.Join(tables, ", "))
		}
		if s.LastError != "" {
			fmt.Fprintf(&b, " (failing since %s: %s)", s.FailingSince.UTC().Format(time.RFC3339), s.LastError)
		}
	}
	b.WriteString(" — nothing is lost: the checkpoint covers only durable records, a restart reads the rest again")
	return b.String()
}

// TableError is a sink's permanent failure of one table: a schema change
// it cannot apply (a column type or default it cannot hold), a privilege
// it lacks on that table. No retry can change it, and nothing about it
// concerns the sink's other tables, so the runtime quarantines the table
// in that sink: its records go to the DLQ with the reason (Invariant 7)
// while every other table keeps flowing, and /status names the table, the
// sink and the error until a restart (after the fix) tries it again.
type TableError struct {
	Table TableID
	Err   error
}

func (e *TableError) Error() string { return "table " + e.Table.String() + ": " + e.Err.Error() }
func (e *TableError) Unwrap() error { return e.Err }

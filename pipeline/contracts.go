package pipeline

import (
	"context"
	"encoding/json"
	"time"
)

// Source streams committed changes in commit order.
//
// The runtime calls Open once, then Read from one goroutine until it stops,
// and Ack from another single goroutine (the committer). Close is called
// last, after Read and Ack have returned for good.
type Source interface {
	// Open connects and prepares to resume strictly after from (nil: start
	// from scratch, which includes the initial snapshot when configured). It
	// fails fast with an actionable error when preflight checks fail.
	Open(ctx context.Context, from Position) error
	// Read blocks until at least one record or a checkpointable position is
	// available and returns them. On ctx cancellation it returns ctx.Err()
	// promptly; records it had not returned are re-read after a restart from
	// the last acknowledged position. io.EOF means the source is finished
	// (bounded sources such as a fixed generate run).
	Read(ctx context.Context) (Batch, error)
	// Ack tells the source that everything up to and including upTo is
	// durable in every sink and committed in the checkpoint store
	// (Invariant 1); the source may now release it upstream (Postgres flush
	// LSN). Calls come in position order from one goroutine and must not
	// block for long; an error is logged and retried on the next Ack.
	Ack(ctx context.Context, upTo Position) error
	// Close releases connections. It must not acknowledge anything.
	Close(ctx context.Context) error
}

// Sink writes records idempotently: Invariant 4 — a record whose version is
// not newer than what the sink holds for its key changes nothing, deletes
// leave versioned tombstones and truncates are versioned table barriers.
type Sink interface {
	// Open connects and prepares the target. It may be retried.
	Open(ctx context.Context) error
	// Write applies the records (in order; a batch may hold several changes
	// of one key, and replays of earlier batches). It returns nil only when
	// every record is durable. A *BatchError reports per-record failures
	// (records not named in it are durable); any other error means none of
	// the batch may be taken as durable and the runtime retries the whole
	// batch with backoff. Errors wrapped with Fatal stop the pipeline.
	// Write honours ctx cancellation by returning ctx.Err(). It must not
	// modify records: the lanes of other sinks may share them.
	Write(ctx context.Context, records []Record) error
	// Close flushes nothing new (Write already made data durable) and
	// releases resources.
	Close(ctx context.Context) error
}

// GenerationKeeper is implemented by sinks that keep versions (every sink
// but a plain Kafka topic, whose readers order by offset). Invariant 10.
type GenerationKeeper interface {
	// Generation returns the highest generation (Version[0]) the sink has
	// recorded, and false when it never recorded one (nothing written).
	// Write records a batch's generation when it exceeds the recorded one,
	// durably and no later than the batch itself, so the answer is never
	// below any version the target holds. Called after Open, before the
	// source opens; it may block on the target and honours ctx.
	Generation(ctx context.Context) (gen uint64, held bool, err error)
}

// Generational is implemented by sources whose versions lead with a
// generation (Invariant 10; every built-in source).
type Generational interface {
	// FloorGeneration is called once, before Open, with the highest
	// generation any sink recorded (held false: no sink recorded one). A
	// source starting without a checkpoint uses floor+1 (0 when nothing is
	// held); one resuming keeps the checkpoint's generation unless a sink
	// recorded a higher one (a later run was cut short before its first
	// checkpoint) or the server changed, and then takes the next above
	// both. It must not block.
	FloorGeneration(floor uint64, held bool)
}

// NextGeneration is the generation a source takes under Generational's
// rules: from is the checkpoint's generation (resumed false: no
// checkpoint), moved whether the server changed since it.
func NextGeneration(floor uint64, held, resumed bool, from uint64, moved bool) uint64 {
	switch {
	case !resumed && !held:
		return 0
	case !resumed:
		return floor + 1
	case moved || (held && floor > from):
		return max(from, floor) + 1
	default:
		return from
	}
}

// Pipeliner is implemented by sinks that can have several batches in
// flight and keep their order (the Kafka producer: idempotent, ordered per
// partition). The lane then starts the next batch while earlier ones are
// still being acknowledged, up to Config.PipelinedWrites, and marks
// batches durable in the order it started them.
type Pipeliner interface {
	// Pipelines reports whether Start may keep several batches in flight;
	// false (a sink whose writes must each be settled before the next
	// begins, such as a transactional one) writes one batch at a time.
	Pipelines() bool
	// Start begins writing records and returns once they are handed over
	// (encoded and queued, so batches started later land after them). An
	// error means none of the batch may be taken as durable, as from
	// Write. ctx bounds the write and must stay live until the Pending is
	// done; records must not be modified until then. Start is called by
	// one goroutine at a time.
	Start(ctx context.Context, records []Record) (Pending, error)
}

// Pending is a started write.
type Pending interface {
	// Done is closed when every record of the batch is settled.
	Done() <-chan struct{}
	// Err, once Done is closed, returns what Write would have returned.
	Err() error
}

// Settled returns a Pending that is already done with err.
func Settled(err error) Pending { return settled{err} }

type settled struct{ err error }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (settled) Done() <-chan struct{} { return closedChan }
func (s settled) Err() error          { return s.err }

// Operator transforms records between source and sinks. Stateless
// operators return nil from Snapshot. Outputs derived from inputs inherit
// their acks because the runtime acknowledges per source batch, after the
// batch's outputs are durable.
type Operator interface {
	// Process maps one batch's records to output records. It must not keep
	// references to in after returning unless it is stateful. An error
	// stops the pipeline (nothing of the batch is acknowledged), except a
	// *Rejects beside the output: those records go to the dead-letter
	// queue and the output moves on. Process runs on the runtime's read
	// goroutine, one batch at a time; it honours ctx when it blocks.
	Process(ctx context.Context, in []Record) ([]Record, error)
	// Snapshot returns state to store with the checkpoint (Invariant 5); nil
	// for stateless operators and for operators that keep their own durable,
	// version-guarded state (transform/join). Operators whose state must be
	// stored with the checkpoint arrive with the windowed transforms; the
	// runtime refuses them until then.
	Snapshot() ([]byte, error)
	// Restore loads state saved by Snapshot.
	Restore([]byte) error
}

// StateOwner is implemented by operators that keep their own durable
// state beside the checkpoint (transform/join). The runtime calls Begin
// once, after loading the checkpoint and before the source opens, so
// before the first Process; an error stops the run before anything is
// read.
type StateOwner interface {
	// Begin tells the operator whether the run resumes from a stored
	// checkpoint. Without one (resumed false) nothing was ever
	// acknowledged, so the source delivers again every input the
	// operator's state could have been built from (an interrupted initial
	// load is redone from a new snapshot): the operator must start from
	// empty state, or rows deleted since the earlier attempt would live on
	// in it (Invariant 5). With one (resumed true) the state must cover
	// every input at or before the checkpoint; an operator whose state
	// cannot (created after the checkpoint, or built for another
	// definition) must fail with the way to rebuild it.
	Begin(ctx context.Context, resumed bool) error
}

// Settler is implemented by operators that keep what they emitted until
// it is durable (a window's final results: transform/window).
type Settler interface {
	// Settled tells the operator that the outputs of the first n batches
	// its Process returned in this run (counted from 1) are durable in
	// every sink. It is called from the checkpoint goroutine, concurrently
	// with Process, and must not block.
	Settled(n uint64)
}

// Checkpointed is implemented by operators that may forget state once no
// restart can hand again the inputs it came from (a dedup's expired keys:
// transform/dedup).
type Checkpointed interface {
	// Checkpointed tells the operator that a stored checkpoint covers the
	// inputs of the first n batches its Process returned in this run (counted
	// from 1): a restart resumes after them. It is called from the
	// checkpoint goroutine after the checkpoint is stored, concurrently
	// with Process, and must not block.
	Checkpointed(n uint64)
}

// Syncer is implemented by StateOwners that write their state at
// checkpoints rather than with every batch (transform/window). Before it
// stores a checkpoint, the runtime calls Sync from the checkpoint
// goroutine; when Sync returns nil, the operator's durable state covers
// every batch its Process returned before the call, so every input at or
// before the checkpoint about to be stored (Invariant 5). Sync may wait
// for a running Process and blocks while it writes; an error fails the
// commit, which is retried at the next one, the checkpoint not stored.
type Syncer interface {
	Sync(ctx context.Context) error
}

// Checkpoint is what the offset store keeps for a pipeline.
type Checkpoint struct {
	Pipeline  string                     `json:"pipeline"`
	Position  json.RawMessage            `json:"position"`
	Operators map[string]json.RawMessage `json:"operators,omitempty"`
	// Seq counts commits; it increases by one with each Commit.
	Seq         uint64    `json:"seq"`
	CommittedAt time.Time `json:"committed_at"`
}

// OffsetStore keeps checkpoints durably.
type OffsetStore interface {
	// Load returns the newest valid checkpoint of pipeline, false when none
	// was ever committed. A corrupt or foreign checkpoint is an error that
	// names the file (or row) and the recovery choices; it is never replaced
	// silently.
	Load(ctx context.Context, pipeline string) (Checkpoint, bool, error)
	// Commit stores cp atomically and durably before returning; after a
	// crash at any moment Load returns either cp or the previous checkpoint.
	Commit(ctx context.Context, cp Checkpoint) error
	// Close releases locks and handles.
	Close() error
}

// DeadLetter is one poison record (Invariant 7).
type DeadLetter struct {
	Time     time.Time       `json:"time"`
	Pipeline string          `json:"pipeline"`
	Stage    string          `json:"stage"` // "source", "transform", or "sink:<name>"
	Table    string          `json:"table,omitempty"`
	Op       string          `json:"op,omitempty"`
	Version  string          `json:"version,omitempty"`
	Position json.RawMessage `json:"position,omitempty"`
	Error    string          `json:"error"`
	// Raw is the record as the stage saw it (JSON of its images for sinks,
	// the undecodable bytes for sources).
	Raw []byte `json:"raw"`
}

// DLQ stores dead letters.
type DLQ interface {
	// Put appends letters durably before returning; the runtime treats the
	// records as handled only after Put returns nil.
	Put(ctx context.Context, letters []DeadLetter) error
	// Depth and OldestAge feed the metrics.
	Depth() int64
	OldestAge() time.Duration
	Close() error
}

// Backfiller is implemented by sources that read tables' existing rows
// while they stream (snapshot.Engine): an operator that orders by event
// time holds its watermark for a table until the table's history has been
// read (Runtime.Backfilling).
type Backfiller interface {
	// Backfilling lists the tables whose existing rows are being read for
	// the first time: an initial or incremental snapshot of a table the
	// sinks do not hold yet. A second read of rows they hold (a filtered
	// re-snapshot, a repair) is not listed. It does not block and is safe
	// to call from any goroutine.
	Backfilling() []TableID
}

// StatusReporter is implemented by sources that can report progress for
// /status and `sluice status`.
type StatusReporter interface {
	Status() SourceStatus
}

// SourceStatus is a source's progress report.
type SourceStatus struct {
	Phase  string        `json:"phase"` // "snapshot", "stream"
	Tables []TableStatus `json:"tables,omitempty"`
	// LagBytes is how far the source is behind the server's log end.
	LagBytes int64 `json:"lag_bytes"`
	// LastEventTime is the commit time of the last transaction handed over.
	LastEventTime time.Time `json:"last_event_time"`
	Connected     bool      `json:"connected"`
	// SnapshotError is the last error of an incremental snapshot still
	// in progress (it is retried).
	SnapshotError string `json:"snapshot_error,omitempty"`
	// Backfilling lists the tables whose history is still being read
	// (Backfiller).
	Backfilling []string `json:"backfilling,omitempty"`
}

// TableStatus is a table's snapshot progress.
type TableStatus struct {
	Table     string `json:"table"`
	RowsDone  int64  `json:"rows_done"`
	RowsTotal int64  `json:"rows_total"` // estimate; 0 when unknown
	Done      bool   `json:"done"`
	// Incremental marks a snapshot read in chunks while the stream flows
	// (snapshot/); Where is its row filter, Chunks the chunks emitted.
	Incremental   bool    `json:"incremental,omitempty"`
	Where         string  `json:"where,omitempty"`
	Chunks        int64   `json:"chunks,omitempty"`
	RowsPerSecond float64 `json:"rows_per_second,omitempty"`
	ETASeconds    float64 `json:"eta_seconds,omitempty"`
	// ReadingAgain, when set, is why the table's current chunk has been
	// read again and again for a while (a visibility lag, a shape the
	// stream has not shown yet); the snapshot goes on once it clears.
	ReadingAgain string `json:"reading_again,omitempty"`
}

package kafka

// Exactly-once mode (Options.ExactlyOnce).
//
// Every Write is one Kafka transaction holding the batch's change events,
// their tombstones, its DLQTopic records and one high-water mark record in
// OffsetsTopic (compacted; key "<pipeline>/<sink>"): the highest record
// Version the batch wrote, the Pos of its last record that has one, and the
// versions of the records the batch handed back as permanent failures. The
// transactional id "sluice-<pipeline>-<sink>" is stable across restarts, so
// a restarted sluice fences the previous process (its open transaction is
// aborted, its later commits fail) before it reads the mark.
//
// The runtime checkpoints to its own offset store after Write returns; a
// crash between the Kafka commit and that checkpoint makes sluice replay
// from an older position. On Open (and after a commit whose outcome is
// unknown) the sink reads OffsetsTopic with read_committed to its end and
// then drops every insert, update and delete whose Version is not above the
// mark: Kafka already holds it. Snapshot rows (OpRead) and truncates are
// never dropped, and snapshot records never raise the mark: all rows of a
// load share one version (or one per parallel reader, which need not
// follow the order they are written in), and a load that did not finish
// is redone from scratch behind fresh truncate barriers.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

const (
	// offsetsTopicSuffix follows ServerName in the default OffsetsTopic.
	offsetsTopicSuffix = ".sluice.offsets"
	// txnEndTimeout bounds committing or aborting one transaction; the end
	// is never cut short by the Write's context, whose cancellation would
	// leave the outcome unknown.
	txnEndTimeout = 30 * time.Second
	// maxTxnTimeout is the broker's default transaction.max.timeout.ms.
	maxTxnTimeout = 15 * time.Minute
	// markReadWait bounds a read of OffsetsTopic that makes no progress.
	markReadWait = 10 * time.Second
)

// txnState is what an ExactlyOnce sink knows of its high-water mark.
type txnState struct {
	// loaded: the mark was read from OffsetsTopic since Open or since the
	// last commit whose outcome is unknown.
	loaded bool
	has    bool             // a mark exists
	hwm    pipeline.Version // highest version Kafka holds from this sink
	pos    json.RawMessage  // Pos of the last positioned record committed
	// markPos and markTx are the Pos and TxID of the record that set hwm
	// (nil and 0 when it had none): what the source's positions can
	// compare across generations (Options.Covers).
	markPos json.RawMessage
	markTx  uint64
	// redo holds the order versions (Record.OrderVersion) at or below hwm
	// that were handed back as permanent failures by the last committed
	// transaction: they are not
	// in Kafka, and a replay must hand them back again so that a crash
	// before the runtime stored them in its dead-letter queue loses none.
	redo map[pipeline.Version]bool
	// gen is the highest generation of any record committed, snapshot
	// rows included (Invariant 10).
	gen upsert.Generation
}

// txnMark is the JSON value of a high-water mark record.
type txnMark struct {
	Pipeline   string          `json:"pipeline"`
	Sink       string          `json:"sink"`
	Version    string          `json:"version"`
	Position   json.RawMessage `json:"position,omitempty"`
	Redo       []string        `json:"redo,omitempty"`
	Generation *uint64         `json:"generation,omitempty"`
	// MarkPosition and MarkTxID are the Pos and TxID of the record whose
	// version is Version.
	MarkPosition json.RawMessage `json:"mark_position,omitempty"`
	MarkTxID     uint64          `json:"mark_txid,omitempty"`
	CommittedAt  time.Time       `json:"committed_at"`
}

// normalizeTxn fills the exactly-once defaults.
func (o *Options) normalizeTxn() error {
	if o.Pipeline == "" {
		o.Pipeline = o.ServerName
	}
	if o.OffsetsTopic == "" {
		prefix := o.ServerName
		if prefix == "" {
			prefix = o.Pipeline
		}
		if prefix == "" {
			prefix = "sluice"
		}
		o.OffsetsTopic = prefix + offsetsTopicSuffix
	}
	for _, c := range []byte(o.OffsetsTopic) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("offsets topic %q: only ASCII letters, digits, '.', '_' and '-' are allowed", o.OffsetsTopic)
		}
	}
	if len(o.OffsetsTopic) > maxTopicLen || o.OffsetsTopic == "." || o.OffsetsTopic == ".." {
		return fmt.Errorf("offsets topic %q is not a valid topic name", o.OffsetsTopic)
	}
	return nil
}

// TransactionalID is the transactional id of an ExactlyOnce sink:
// "sluice-<pipeline>-<sink name>", the same after every restart.
func (o *Options) TransactionalID() string { return "sluice-" + o.Pipeline + "-" + o.Name }

// markKey is the key of the sink's high-water mark in OffsetsTopic.
func (o *Options) markKey() string { return o.Pipeline + "/" + o.Name }

// txnClientOpts adds the transactional producer settings.
func (o *Options) txnClientOpts() []kgo.Opt {
	if !o.ExactlyOnce {
		return nil
	}
	// A transaction lives as long as a Write: its records may wait up to
	// DeliveryTimeout, so the coordinator must not abort it sooner.
	timeout := min(max(2*o.Producer.DeliveryTimeout, time.Minute), maxTxnTimeout)
	return []kgo.Opt{kgo.TransactionalID(o.TransactionalID()), kgo.TransactionTimeout(timeout)}
}

// openTxn fences earlier producers with the sink's transactional id (their
// open transaction is aborted, or completed when it was already
// committing), creates OffsetsTopic when topics are created, and reads the
// high-water mark. Called from Open with s.mu held.
func (s *Sink) openTxn(ctx context.Context) error {
	if _, _, err := s.client.ProducerID(ctx); err != nil {
		if isFenced(err) || isFatal(err) {
			return pipeline.Fatal(fmt.Errorf("kafka sink %s: transactional id %s: %w", s.opts.Name, s.opts.TransactionalID(), err))
		}
		return fmt.Errorf("kafka sink %s: transactional id %s: %w", s.opts.Name, s.opts.TransactionalID(), err)
	}
	if s.opts.CreateTopics.Enabled {
		if err := s.createOffsetsTopic(ctx); err != nil {
			return err
		}
	}
	s.txn = txnState{}
	// A topic just created takes a moment to appear in the metadata.
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := s.loadMark(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, errTopicNotYet) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.log.Info("exactly-once mode", zap.String("transactional_id", s.opts.TransactionalID()),
		zap.String("offsets_topic", s.opts.OffsetsTopic), zap.Bool("has_mark", s.txn.has),
		zap.String("high_water_version", s.txn.hwm.String()), zap.ByteString("high_water_position", s.txn.pos))
	return nil
}

// errTopicNotYet: the offsets topic was created but the metadata does not
// show it yet.
var errTopicNotYet = errors.New("the topic does not exist yet")

// loadMark reads OffsetsTopic with read_committed up to its last stable
// offset and keeps the newest mark of this sink.
func (s *Sink) loadMark(ctx context.Context) error {
	topic := s.opts.OffsetsTopic
	fail := func(err error) error {
		return fmt.Errorf("kafka sink %s: read offsets topic %s: %w", s.opts.Name, topic, err)
	}
	key := []byte(s.opts.markKey())
	var newest *kgo.Record
	// Up to the last stable offset: nothing of an open transaction of
	// another producer is waited for (ours was just fenced).
	err := scanTopic(ctx, s.client, topic, false, markReadWait, func(r *kgo.Record) error {
		if string(r.Key) == string(key) && (newest == nil || r.Timestamp.After(newest.Timestamp) ||
			(r.Partition == newest.Partition && r.Offset > newest.Offset)) {
			newest = r
		}
		return nil
	})
	switch {
	case errors.Is(err, errNoTopic):
		if s.opts.CreateTopics.Enabled {
			return fail(errTopicNotYet)
		}
		return pipeline.Fatal(fail(errors.New("the topic does not exist and create_topics is disabled: create it (cleanup.policy=compact)")))
	case err != nil:
		return fail(err)
	}
	st := txnState{loaded: true}
	if newest != nil && newest.Value != nil {
		var m txnMark
		if err := json.Unmarshal(newest.Value, &m); err != nil {
			return pipeline.Fatal(fail(fmt.Errorf("mark at partition %d offset %d is not JSON: %w", newest.Partition, newest.Offset, err)))
		}
		v, err := pipeline.ParseVersion(m.Version)
		if err != nil {
			return pipeline.Fatal(fail(fmt.Errorf("mark at partition %d offset %d: %w", newest.Partition, newest.Offset, err)))
		}
		st.has, st.hwm, st.pos = true, v, m.Position
		st.markPos, st.markTx = m.MarkPosition, m.MarkTxID
		st.gen = upsert.Generation{Gen: v[0], Held: true}
		if m.Generation != nil && *m.Generation > v[0] {
			st.gen.Gen = *m.Generation
		}
		for _, r := range m.Redo {
			rv, err := pipeline.ParseVersion(r)
			if err != nil {
				return pipeline.Fatal(fail(fmt.Errorf("mark at partition %d offset %d: %w", newest.Partition, newest.Offset, err)))
			}
			if st.redo == nil {
				st.redo = map[pipeline.Version]bool{}
			}
			st.redo[rv] = true
		}
	}
	s.txn = st
	return nil
}

// Generation implements pipeline.GenerationKeeper: an exactly-once sink
// keeps the highest generation it committed in its mark, a plain one in
// its generation record (generation.go).
func (s *Sink) Generation(ctx context.Context) (uint64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opts.ExactlyOnce {
		if !s.gen.loaded {
			if err := s.loadGeneration(ctx); err != nil {
				return 0, false, err
			}
		}
		return s.gen.gen.Gen, s.gen.gen.Held, nil
	}
	if !s.txn.loaded {
		if err := s.loadMark(ctx); err != nil {
			return 0, false, err
		}
	}
	return s.txn.gen.Gen, s.txn.gen.Held, nil
}

// skip reports whether r is a stream change Kafka already holds.
//
// The mark orders records by their OrderVersion: a source change's own
// version, or for an operator's output the version of the input it
// stems from (a join raises a replayed output's Version above later
// inputs of its transaction, which the mark must never pass). A source
// change at or below the mark was committed. An output whose input is
// below the mark was too: outputs follow their input, and a later
// input was committed. One whose input is the mark itself may have been
// cut off from it by a split into several transactions, so it is
// written again (a duplicate, never a loss).
//
// A source change of a later generation than the mark's sorts above it
// whatever it is: a run on another server, or one after a cut-short run,
// replays the changes after the checkpoint with new versions. Where the
// source's positions name transactions on every server (covers), such a
// change is recognised by its Pos: within the mark's, it was committed,
// unless it belongs to the mark's own transaction (same TxID) at a later
// index, which a split into several transactions may have cut off. Which
// transaction is the mark's is told by TxID alone (a GTID's sequence
// number, without its domain or server): a coincidence can only make a
// committed change be written again. With permanent failures to hand back
// (redo) nothing is skipped this way: they are known by version only.
//
// Snapshot records (reads, the deletes a routing or a filter makes of
// them, a repair's deletes) are never skipped, as they never raise the
// mark: their versions need not follow the order they are written in.
func (st *txnState) skip(r *pipeline.Record, covers pipeline.PositionOrder) bool {
	if !st.has || !r.IsStream() {
		return false
	}
	switch r.Op {
	case pipeline.OpInsert, pipeline.OpUpdate, pipeline.OpDelete:
		if st.redo[r.OrderVersion()] {
			return false
		}
		if r.Derived() {
			return r.Origin.Less(st.hwm)
		}
		if r.Version[0] > st.hwm[0] && len(st.redo) > 0 {
			return false
		}
		mark := pipeline.Applied{Version: st.hwm, Pos: pipeline.Position(st.markPos), TxID: st.markTx}
		return mark.Replayed(r, covers)
	}
	return false
}

// writeTxn is Write in exactly-once mode; s.mu is held. One call is one
// transaction (none when nothing is left to produce): it commits and
// returns nil, or returns a *pipeline.BatchError of permanent failures with
// everything else committed, or aborts and returns an error (the runtime
// retries the batch; nothing of it is visible to read_committed consumers).
func (s *Sink) writeTxn(ctx context.Context, records []pipeline.Record) error {
	if !s.txn.loaded {
		if err := s.loadMark(ctx); err != nil {
			return err
		}
	}
	var (
		work    = make([]pending, 0, len(records))
		bad     []pipeline.RecordError
		skipped int
		mem     slab
	)
	for i := range records {
		r := &records[i]
		if !r.Op.IsData() {
			continue
		}
		if s.txn.skip(r, s.opts.Covers) {
			skipped++
			continue
		}
		recs, err := s.prepare(ctx, r, &mem)
		var ue unencodable
		switch {
		case errors.As(err, &ue):
			bad = append(bad, pipeline.RecordError{Index: i, Err: ue.err, Permanent: true})
		case err != nil:
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			return err
		default:
			work = append(work, s.pendingOf(i, r, recs))
		}
	}
	if skipped > 0 {
		s.log.Info("dropped changes the offsets topic shows as committed in Kafka", zap.Int("records", skipped),
			zap.String("high_water_version", s.txn.hwm.String()))
	}
	for _, f := range bad {
		r := &records[f.Index]
		// Invariant 9: every record that is dead-lettered is logged.
		s.log.Warn("record cannot be encoded", zap.Int("index", f.Index), zap.String("table", tableName(r)),
			zap.String("version", r.Version.String()), zap.Bool("dlq_topic", s.opts.DLQTopic != ""), zap.Error(f.Err))
	}
	// Invariant 7: dead letters go to the DLQ topic in the same
	// transaction, or back to the runtime as permanent failures.
	if s.opts.DLQTopic != "" {
		for _, f := range bad {
			work = append(work, pending{idx: f.Index, recs: []*kgo.Record{s.deadLetter(&records[f.Index], f.Err)}})
		}
		bad = nil
	}
	for {
		if len(work) == 0 {
			mem.release() // every promise produced so far fired
			if len(bad) > 0 {
				return &pipeline.BatchError{Failed: bad}
			}
			return nil
		}
		refused, err := s.commitTxn(ctx, records, work, bad)
		if err != nil {
			return err // records may still be buffered: their memory is not released
		}
		if len(refused) == 0 {
			mem.release() // every promise fired; nothing refers to the records
			if len(bad) > 0 {
				return &pipeline.BatchError{Failed: bad}
			}
			// Invariant 1: nil only once the transaction holding every
			// record of the batch is committed.
			return nil
		}
		// The broker refused some records for good: the transaction was
		// aborted; produce the others again without them.
		keep := work[:0]
		for _, p := range work {
			if e, ok := refused[p.idx]; ok {
				bad = append(bad, pipeline.RecordError{Index: p.idx, Err: fmt.Errorf("broker refused the record: %w", e), Permanent: true})
				continue
			}
			keep = append(keep, p)
		}
		work = keep
	}
}

// commitTxn produces work and the new high-water mark in one transaction
// and commits it. When the broker refuses records for good the transaction
// is aborted and they are returned; any other failure aborts it and is
// returned as the error (classified by judge).
func (s *Sink) commitTxn(ctx context.Context, records []pipeline.Record, work []pending, bad []pipeline.RecordError) (map[int]error, error) {
	next := s.txn
	next.redo = nil
	var latest pipeline.Position
	// Snapshot records never move the mark: skip never drops them, and
	// their versions need not follow the order they are written in (with
	// parallel MariaDB readers a later reader's rows sort above stream
	// changes written after them, which the mark would then skip).
	var top *pipeline.Record // the record that set hwm
	raise := func(r *pipeline.Record) {
		if o := r.OrderVersion(); r.IsStream() && (!next.has || next.hwm.Less(o)) {
			next.has, next.hwm, top = true, o, r
		}
	}
	for _, p := range work {
		raise(&records[p.idx])
	}
	for _, f := range bad {
		r := &records[f.Index]
		raise(r)
		if next.redo == nil {
			next.redo = map[pipeline.Version]bool{}
		}
		next.redo[r.OrderVersion()] = true
	}
	if top != nil {
		// Checked once per batch, not per record. An operator's output
		// need not carry its input's TxID: no position, so nothing is
		// skipped by it (skip).
		next.markPos, next.markTx = nil, top.TxID
		if top.Pos != nil && !top.Derived() && json.Valid(top.Pos) {
			next.markPos = json.RawMessage(top.Pos)
		}
	}
	for i := range records {
		if records[i].Pos != nil {
			latest = records[i].Pos
		}
	}
	if latest != nil && json.Valid(latest) {
		next.pos = json.RawMessage(latest)
	}
	if g, ok := next.gen.Raise(records); ok {
		next.gen = upsert.Generation{Gen: g, Held: true}
	}
	mark := txnMark{Pipeline: s.opts.Pipeline, Sink: s.opts.Name, Version: next.hwm.String(), Position: next.pos,
		MarkPosition: next.markPos, MarkTxID: next.markTx, CommittedAt: time.Now().UTC()}
	if next.gen.Held {
		g := next.gen.Gen
		mark.Generation = &g
	}
	for v := range next.redo {
		mark.Redo = append(mark.Redo, v.String())
	}
	val, err := json.Marshal(mark)
	if err != nil {
		return nil, err
	}
	markRec := &kgo.Record{Topic: s.opts.OffsetsTopic, Key: []byte(s.opts.markKey()), Value: val}

	if err := s.client.BeginTransaction(); err != nil {
		return nil, s.txnError("begin transaction", err)
	}
	all := append(append(make([]pending, 0, len(work)+1), work...), pending{idx: -1, recs: []*kgo.Record{markRec}})
	errs, err := s.produce(ctx, all)
	if err != nil {
		s.abortTxn(ctx)
		return nil, err // ctx's error
	}
	refused, err := s.judge(all, errs)
	if cerr := ctx.Err(); cerr != nil && !pipeline.IsFatal(err) {
		s.abortTxn(ctx)
		return nil, cerr
	}
	switch {
	case err != nil:
		s.abortTxn(ctx)
		return nil, fmt.Errorf("%w (transaction aborted)", err)
	case len(refused) > 0:
		s.abortTxn(ctx)
		return refused, nil
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txnEndTimeout)
	defer cancel()
	if err := s.client.EndTransaction(ectx, kgo.TryCommit); err != nil {
		// The outcome may be unknown: abort what may still be open (the
		// documented retry) and read the mark again before the next
		// transaction, so a commit that did happen is not produced twice.
		if aerr := s.client.EndTransaction(ectx, kgo.TryAbort); aerr != nil {
			s.log.Warn("abort after a failed commit", zap.Error(aerr))
		}
		s.txn.loaded = false
		return nil, s.txnError("commit transaction", err)
	}
	next.loaded = true
	s.txn = next
	return nil, nil
}

// abortTxn drops the buffered records and aborts the open transaction,
// whatever ctx says. A failure leaves the transaction to the coordinator's
// timeout (and the next InitProducerID); the mark is read again.
func (s *Sink) abortTxn(ctx context.Context) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txnEndTimeout)
	defer cancel()
	err := s.client.AbortBufferedRecords(actx)
	if err == nil {
		err = s.client.EndTransaction(actx, kgo.TryAbort)
	}
	if err != nil {
		s.log.Warn("abort transaction", zap.Error(err))
		s.txn.loaded = false
	}
}

// txnError classifies a transaction failure: fenced (another sluice with
// the same transactional id took over) and authorization failures are
// fatal, anything else is retried.
func (s *Sink) txnError(what string, err error) error {
	err = fmt.Errorf("kafka sink %s: %s (transactional id %s): %w", s.opts.Name, what, s.opts.TransactionalID(), err)
	if isFenced(err) {
		return pipeline.Fatal(fmt.Errorf("%w; another process with the same pipeline and sink name produces with this transactional id", err))
	}
	if isFatal(err) {
		return pipeline.Fatal(err)
	}
	return err
}

// isFenced reports that a newer producer with the same transactional id
// exists.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

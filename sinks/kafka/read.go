package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

var _ verify.Sink = (*Sink)(nil)

// Rows implements verify.Sink: the rows a consumer holds after reading the
// table's topic from the start with read_committed and keeping, per key,
// the newest event. table is a source shape as routed to this sink; the
// rows are the record model's values (exactly as the source produces
// them), aligned with table.Columns, in no particular order.
//
// Reading: every partition of the topic (TopicName of table.ID), and of
// the topics route transforms send the table's rows to (RouteTopics), from its
// log start offset up to the high watermark listed when Rows starts, so
// the cost is a full read of the topic. A transaction still open then
// holds the last stable offset back and is waited for (the broker aborts
// it by its transaction timeout at the latest); records of aborted
// transactions do not count. A topic that does not exist has no rows.
//
// Decoding: each key and value is decoded with the schema its id names in
// the registry (the SchemaLookup). An event written under another shape of
// the table is read into table's shape by Avro schema resolution: a column
// the event lacks reads as nil, one the table no longer has is dropped; a
// shape resolution cannot map (a column's type changed) fails the read.
//
// Folding: events are ordered per key (the decoded Kafka key) by their
// sluice.version header (records of other tables, in a topic several
// tables share, are skipped): a higher version replaces what the key
// holds, and one not higher is a replay and is ignored, as every sink
// refuses a change whose version is not greater (Invariant 4). A key
// whose newest event is a delete event or a tombstone has no row. A
// truncate event (the Debezium envelope's "t", keyless, on whichever
// partition it landed) is a barrier: every key whose newest version is
// below the highest truncate version has no row, whatever the partition
// order; events above it stand. A compacted topic holds no truncate
// events (the sink dead-letters them and leaves out the initial load's
// barriers). A value left Unchanged (TOAST) takes the key's previous
// live value, and is nil when the key held no live row. Versions order
// events as a consumer that honours sluice.version sees them: a plain
// topic written again from generation 0 after a reset (docs/versions.md,
// Open) can hold newer events under lower versions, which this order
// hides.
//
// Rows needs no Open and changes nothing: it reads with its own
// short-lived client built from the connection options (brokers, TLS,
// SASL) and none of the producer's, so it never uses the transactional id
// of an exactly-once sink (which would fence a running pipeline's
// producer); it creates no topic and registers no schema. It may run
// beside Write, from another goroutine. It blocks until the read is done
// and honours ctx. Tables without key columns are refused: their events
// have no key to fold by.
func (s *Sink) Rows(ctx context.Context, table *pipeline.Table) ([][]any, error) {
	fail := func(err error) error { return fmt.Errorf("kafka sink %s: table %s: %w", s.opts.Name, table.ID, err) }
	if len(table.KeyIdx) == 0 {
		return nil, fail(errors.New("the table has no key columns, so its events cannot be folded into rows"))
	}
	var topics []string
	for _, tmpl := range append([]string{s.opts.TopicTemplate}, s.opts.RouteTopics...) {
		topic, err := TopicName(tmpl, s.opts.ServerName, table.ID)
		if err != nil {
			return nil, fail(err)
		}
		if !slices.Contains(topics, topic) {
			topics = append(topics, topic)
		}
	}
	lookup := s.schemaLookup()
	if lookup == nil {
		return nil, fail(errors.New("the registry client cannot look schemas up by id (it has no SchemaByID)"))
	}
	dec, err := newDecoder(table, s.cache.Options, s.opts.Envelope == EnvelopeRow, lookup)
	if err != nil {
		return nil, fail(err)
	}
	opts, err := s.opts.connOpts("sluice-" + s.opts.Name + "-verify")
	if err != nil {
		return nil, fail(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fail(err)
	}
	defer cl.Close()
	f := fold{keys: map[string]*folded{}}
	for _, topic := range topics {
		err = scanTopic(ctx, cl, topic, true, maxTxnTimeout, func(r *kgo.Record) error {
			ev, err := dec.decode(ctx, r)
			if err != nil {
				return fmt.Errorf("partition %d offset %d: %w", r.Partition, r.Offset, err)
			}
			f.apply(ev)
			return nil
		})
		if err != nil && !errors.Is(err, errNoTopic) {
			return nil, fail(fmt.Errorf("topic %s: %w", topic, err))
		}
	}
	return f.rows(), nil
}

// event is one decoded record of a table topic.
type event struct {
	version  pipeline.Version
	other    bool   // another table's record (a shared topic): ignored
	truncate bool   // a truncate event: no key, no row
	key      string // verify.Key of the decoded Kafka key
	row      []any  // the row image; nil for a delete event or a tombstone
}

// folded is the newest event of one key.
type folded struct {
	row     []any // nil: deleted
	version pipeline.Version
}

// fold keeps the newest event per key and the highest truncate barrier
// (see Rows).
type fold struct {
	keys    map[string]*folded
	barrier pipeline.Version
	barred  bool
}

// apply folds ev.
func (f *fold) apply(ev event) {
	if ev.other {
		return
	}
	if ev.truncate {
		if !f.barred || f.barrier.Less(ev.version) {
			f.barrier, f.barred = ev.version, true
		}
		return
	}
	old := f.keys[ev.key]
	// A row a route moved to another topic is a delete in the topic it
	// left at the version it is written with in the other: at one
	// version, the live row wins (one topic never holds both).
	moved := old != nil && old.version == ev.version && old.row == nil && ev.row != nil
	if old != nil && !old.version.Less(ev.version) && !moved {
		return
	}
	for i, x := range ev.row {
		if _, unchanged := x.(pipeline.Unchanged); unchanged {
			ev.row[i] = nil
			if old != nil && old.row != nil && i < len(old.row) {
				ev.row[i] = old.row[i]
			}
		}
	}
	f.keys[ev.key] = &folded{row: ev.row, version: ev.version}
}

// rows returns the live rows: not deleted, not below the barrier.
func (f *fold) rows() [][]any {
	out := make([][]any, 0, len(f.keys))
	for _, k := range f.keys {
		if k.row != nil && !(f.barred && k.version.Less(f.barrier)) {
			out = append(out, k.row)
		}
	}
	return out
}

// errNoTopic: the topic does not exist.
var errNoTopic = errors.New("the topic does not exist")

// scanTopic reads every partition of topic, one after another, from its
// log start offset up to the end offset listed before the read: the high
// watermark when toHighWatermark, else the last stable offset. It calls fn
// for every committed record (scanPartition) and stops at fn's first
// error. A topic that does not exist gives errNoTopic; nothing is created.
// It blocks until done and honours ctx.
func scanTopic(ctx context.Context, cl *kgo.Client, topic string, toHighWatermark bool, wait time.Duration, fn func(*kgo.Record) error) error {
	adm := kadm.NewClient(cl)
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return err
	}
	td, ok := md.Topics[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return errNoTopic
	}
	if td.Err != nil {
		return td.Err
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return err
	}
	list := adm.ListCommittedOffsets
	if toHighWatermark {
		list = adm.ListEndOffsets
	}
	ends, err := list(ctx, topic)
	if err != nil {
		return err
	}
	parts := make([]int32, 0, len(td.Partitions))
	for p := range td.Partitions {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	for _, p := range parts {
		start, ok1 := starts.Lookup(topic, p)
		end, ok2 := ends.Lookup(topic, p)
		if !ok1 || !ok2 || start.Err != nil || end.Err != nil {
			return fmt.Errorf("partition %d: no offsets: %w", p, errors.Join(start.Err, end.Err))
		}
		if err := scanPartition(ctx, cl, topic, td.ID, p, td.Partitions[p].Leader, start.Offset, end.Offset, wait, fn); err != nil {
			return err
		}
	}
	return nil
}

// scanPartition reads partition p of topic from start up to end with
// read_committed fetches sent to the leader, calling fn for every
// committed record in offset order. Control records and aborted batches
// advance the offset without being returned. A fetch that brings nothing
// ends the read when the partition's last stable offset has reached end
// (what is left below end was removed by compaction); otherwise an open
// transaction holds it back, and the read waits, failing after wait
// without progress.
func scanPartition(ctx context.Context, cl *kgo.Client, topic string, id kadm.TopicID, p, leader int32, start, end int64,
	wait time.Duration, fn func(*kgo.Record) error) error {
	off, progress := start, time.Now()
	for off < end {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 100
		req.MaxBytes = 16 << 20
		req.IsolationLevel = 1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = p, off, 8<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			return err
		}
		resp := kresp.(*kmsg.FetchResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return fmt.Errorf("partition %d: unexpected fetch response shape", p)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset: off, IsolationLevel: kgo.ReadCommitted(), Topic: topic, Partition: p,
		}, &resp.Topics[0].Partitions[0], kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return fmt.Errorf("partition %d offset %d: %w", p, off, fp.Err)
		}
		for _, r := range fp.Records {
			if r.Offset >= end {
				break
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		if next > off {
			off, progress = next, time.Now()
			continue
		}
		if fp.LastStableOffset >= end {
			return nil
		}
		if time.Since(progress) > wait {
			return fmt.Errorf("partition %d: no progress at offset %d for %s (end %d, last stable offset %d: a transaction left open?)",
				p, off, wait, end, fp.LastStableOffset)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// header returns the value of r's header key.
func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

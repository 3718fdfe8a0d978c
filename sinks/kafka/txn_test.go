package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
)

// serverOf is the server name (topic prefix) of a test: its own on a
// shared broker.
func serverOf(t *testing.T) string {
	n := []byte(t.Name())
	for i, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			n[i] = '_'
		}
	}
	return string(n)
}

// txnSink opens an exactly-once sink of pipeline "p" on brokers.
func txnSink(t *testing.T, brokers []string, reg schema.Registry, mod func(*Options)) *Sink {
	t.Helper()
	o := Defaults(brokers, serverOf(t))
	o.CreateTopics = TopicOptions{Enabled: true, Partitions: 2, ReplicationFactor: 1}
	o.Producer.DeliveryTimeout = 10 * time.Second
	o.ExactlyOnce, o.Pipeline = true, "p"
	if mod != nil {
		mod(&o)
	}
	s, err := New(o, reg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// txnBatches is a change log of n batches of size changes over keys keys,
// versions increasing; every fifth change is a delete.
func txnBatches(n, size, keys int) [][]pipeline.Record {
	var out [][]pipeline.Record
	for b := 0; b < n; b++ {
		var recs []pipeline.Record
		for i := b * size; i < (b+1)*size; i++ {
			r := fakeRec(i, keys)
			if i%5 == 4 {
				r.Op, r.Before, r.After = pipeline.OpDelete, r.After, nil
			}
			recs = append(recs, r)
		}
		out = append(out, recs)
	}
	return out
}

// exactlyOnce checks that a read_committed consumer sees every change of
// log exactly once (a delete: its event and its tombstone).
func exactlyOnce(t *testing.T, brokers []string, log [][]pipeline.Record) {
	t.Helper()
	got := fakeVersions(t, brokers, serverOf(t)+".public.items", true)
	want := map[string]int{}
	for _, b := range log {
		for _, r := range b {
			want[r.Version.String()] = 1
			if r.Op == pipeline.OpDelete {
				want[r.Version.String()] = 2 // the event and its tombstone
			}
		}
	}
	for v, n := range want {
		if got[v] != n {
			t.Errorf("version %s: %d records, want %d", v, got[v], n)
		}
	}
	for v := range got {
		if want[v] == 0 {
			t.Errorf("version %s was not written", v)
		}
	}
}

// testTxnCrashReplay: batches 1..N are committed, the process "crashes"
// after the Kafka commits but before the runtime's checkpoint passed batch
// k, and a new sink (same pipeline and sink name) gets batches k..N again
// followed by new ones: consumers see every change once.
func testTxnCrashReplay(t *testing.T, brokers []string, reg schema.Registry) {
	log := txnBatches(8, 10, 25)
	first := txnSink(t, brokers, reg, nil)
	for _, b := range log[:6] {
		if err := first.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	// Crash: first is abandoned without Close; the restarted sink fences it.
	second := txnSink(t, brokers, reg, nil)
	if !second.txn.has || second.txn.hwm != log[5][9].Version || posN(second.txn.pos) != 59 {
		t.Fatalf("restarted sink read mark %+v", second.txn)
	}
	for _, b := range log[2:] { // the runtime replays from an older checkpoint
		if err := second.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	exactlyOnce(t, brokers, log)
	// The zombie cannot commit any more.
	err := first.Write(t.Context(), txnBatches(9, 10, 25)[8])
	if err == nil || !pipeline.IsFatal(err) {
		t.Fatalf("fenced sink's write returned %v, want a fatal error", err)
	}
	exactlyOnce(t, brokers, log)
}

// testTxnFencing: two sinks with one transactional id: the newer fences the
// older, whose transaction fails for good and stays invisible.
func testTxnFencing(t *testing.T, brokers []string, reg schema.Registry) {
	log := txnBatches(3, 4, 10)
	old := txnSink(t, brokers, reg, func(o *Options) { o.Pipeline = "fence" })
	if err := old.Write(t.Context(), log[0]); err != nil {
		t.Fatal(err)
	}
	newer := txnSink(t, brokers, reg, func(o *Options) { o.Pipeline = "fence" })
	err := old.Write(t.Context(), log[1])
	if err == nil || !pipeline.IsFatal(err) {
		t.Fatalf("older sink's write returned %v, want a fatal (fenced) error", err)
	}
	if err := newer.Write(t.Context(), log[2]); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, brokers, [][]pipeline.Record{log[0], log[2]})
}

// testTxnRedo: a record handed back as a permanent failure is handed back
// again after a restart (so a crash before the runtime's dead-letter queue
// stored it loses nothing), while its committed neighbours are skipped.
func testTxnRedo(t *testing.T, brokers []string, reg schema.Registry) {
	log := txnBatches(2, 5, 50)
	bad := pipeline.Record{Op: pipeline.OpUpdate, Version: pipeline.Version{0, 0, 0, 3}} // no table: unencodable
	log[0][2] = bad
	s := txnSink(t, brokers, reg, func(o *Options) { o.Pipeline = "redo" })
	var be *pipeline.BatchError
	if err := s.Write(t.Context(), log[0]); !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[0].Index != 2 {
		t.Fatalf("write: %v", err)
	}
	again := txnSink(t, brokers, reg, func(o *Options) { o.Pipeline = "redo" })
	if err := again.Write(t.Context(), log[0]); !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[0].Index != 2 {
		t.Fatalf("replay: %v, want the unencodable record handed back again", err)
	}
	if err := again.Write(t.Context(), log[1]); err != nil {
		t.Fatal(err)
	}
	log[0] = append(append([]pipeline.Record{}, log[0][:2]...), log[0][3:]...)
	exactlyOnce(t, brokers, log)
}

// testTxnSnapshotAboveStream: with parallel initial-load readers (MariaDB)
// a later reader's rows carry a higher version than stream changes
// committed before its snapshot but after an earlier reader's, and those
// changes are written after the rows. The high-water mark must not count
// snapshot rows, or the changes — new keys included — would be skipped as
// already written; a replay after a crash still skips what was committed.
// Half the reader's rows are routed to other sinks (transform/route):
// this sink takes a delete of each, which is a snapshot record as well.
func testTxnSnapshotAboveStream(t *testing.T, brokers []string, reg schema.Registry) {
	rec := func(op pipeline.Op, key, ver int) pipeline.Record {
		r := fakeRec(ver, 1000)
		r.Op, r.After[0], r.Version = op, int64(key), pipeline.Version{0, 0, 0, uint64(ver)}
		r.Snapshot = op == pipeline.OpRead
		return r
	}
	var load, stream, later []pipeline.Record
	away := &pipeline.Dest{To: []string{"elsewhere"}, Away: []string{"kafka"}}
	for k := range 10 {
		r := rec(pipeline.OpRead, k, 100) // the second reader's rows
		if k%2 == 1 {
			r.Dest = away
		}
		load = append(load, r)
	}
	load = pipeline.ForSink("kafka", load)
	for k := range 10 {
		stream = append(stream, rec(pipeline.OpInsert, 500+k, 50+k)) // between the readers' snapshots
	}
	for k := range 10 {
		later = append(later, rec(pipeline.OpUpdate, 500+k, 200+k))
	}
	s := txnSink(t, brokers, reg, nil)
	for _, b := range [][]pipeline.Record{load, stream} {
		if err := s.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	// Crash before the checkpoint passed stream: a new sink gets it again.
	again := txnSink(t, brokers, reg, nil)
	for _, b := range [][]pipeline.Record{stream, later} {
		if err := again.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	got := fakeVersions(t, brokers, serverOf(t)+".public.items", true)
	for _, r := range append(append([]pipeline.Record(nil), stream...), later...) {
		if n := got[r.Version.String()]; n != 1 {
			t.Errorf("stream change %s: %d records, want 1", r.Version, n)
		}
	}
	want := 0
	for _, r := range load {
		want++
		if r.Op == pipeline.OpDelete {
			want++ // and its tombstone
		}
	}
	if n := got[load[0].Version.String()]; n != want {
		t.Errorf("snapshot rows and deletes: %d records, want %d", n, want)
	}
}

// testTxnNewGeneration: a re-snapshot from a restored cluster (LSNs low
// again) under a new generation after the sink committed changes at high
// LSNs. Every change of the new generation is written although its LSN is
// below the mark; the mark records each generation, snapshot-only
// batches included, and a restarted sink reports it (Invariant 10).
func testTxnNewGeneration(t *testing.T, brokers []string, reg schema.Registry) {
	rec := func(op pipeline.Op, key int, v pipeline.Version) pipeline.Record {
		r := fakeRec(key, 1000)
		r.Op, r.After[0], r.Version, r.Snapshot = op, int64(key), v, op == pipeline.OpRead
		return r
	}
	gen := func(s *Sink) (uint64, bool) {
		g, held, err := s.Generation(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return g, held
	}
	s := txnSink(t, brokers, reg, nil)
	if _, held := gen(s); held {
		t.Fatal("a fresh sink reports a generation")
	}
	var old, load, stream []pipeline.Record
	for k := range 10 {
		old = append(old, rec(pipeline.OpUpdate, k, pipeline.Version{0, 0x9000000, 0, uint64(2 + k)}))
		load = append(load, rec(pipeline.OpRead, k, pipeline.Version{1, 0x1600000, 0, 1}))
		stream = append(stream, rec(pipeline.OpUpdate, k, pipeline.Version{1, 0x1700000, 0, uint64(2 + k)}))
	}
	if err := s.Write(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	if g, held := gen(txnSink(t, brokers, reg, nil)); g != 0 || !held {
		t.Fatalf("after generation 0: %d, %v", g, held)
	}
	s = txnSink(t, brokers, reg, nil)
	if err := s.Write(t.Context(), load); err != nil {
		t.Fatal(err)
	}
	// Crash after the load: the restarted sink knows generation 1 from
	// the snapshot rows alone (they never move the high-water mark).
	s = txnSink(t, brokers, reg, nil)
	if g, held := gen(s); g != 1 || !held {
		t.Fatalf("after a snapshot-only batch of generation 1: %d, %v", g, held)
	}
	if err := s.Write(t.Context(), stream); err != nil {
		t.Fatal(err)
	}
	got := fakeVersions(t, brokers, serverOf(t)+".public.items", true)
	for _, r := range append(append(append([]pipeline.Record(nil), old...), load[:1]...), stream...) {
		want := 1
		if r.Snapshot {
			want = len(load)
		}
		if n := got[r.Version.String()]; n != want {
			t.Errorf("%s %s: %d records, want %d", r.Op, r.Version, n, want)
		}
	}
}

// TestTxnKfake runs the exactly-once tests on kfake, plus the visibility
// tests that need injected faults.
func TestTxnKfake(t *testing.T) {
	newCluster := func(t *testing.T) (*kfake.Cluster, schema.Registry) {
		reg, _ := registryFor(t)
		return fakeCluster(t), reg
	}
	t.Run("CrashReplay", func(t *testing.T) { c, reg := newCluster(t); testTxnCrashReplay(t, c.ListenAddrs(), reg) })
	t.Run("Fencing", func(t *testing.T) { c, reg := newCluster(t); testTxnFencing(t, c.ListenAddrs(), reg) })
	t.Run("Redo", func(t *testing.T) { c, reg := newCluster(t); testTxnRedo(t, c.ListenAddrs(), reg) })
	t.Run("SnapshotAboveStream", func(t *testing.T) { c, reg := newCluster(t); testTxnSnapshotAboveStream(t, c.ListenAddrs(), reg) })
	t.Run("NewGeneration", func(t *testing.T) { c, reg := newCluster(t); testTxnNewGeneration(t, c.ListenAddrs(), reg) })
	t.Run("JoinReplay", func(t *testing.T) { c, reg := newCluster(t); testTxnJoinReplay(t, c.ListenAddrs(), reg) })

	// A transaction's records are invisible to read_committed consumers
	// until EndTxn commits them.
	t.Run("InvisibleUntilCommit", func(t *testing.T) {
		c, reg := newCluster(t)
		var hold atomic.Bool
		release := make(chan struct{})
		c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if hold.Load() && req.(*kmsg.EndTxnRequest).Commit {
				c.SleepControl(func() { <-release })
			}
			return nil, nil, false
		})
		s := txnSink(t, c.ListenAddrs(), reg, nil)
		log := txnBatches(2, 5, 10)
		if err := s.Write(t.Context(), log[0]); err != nil {
			t.Fatal(err)
		}
		hold.Store(true)
		done := make(chan error, 1)
		go func() { done <- s.Write(t.Context(), log[1]) }()
		deadline := time.Now().Add(10 * time.Second)
		for sum(fakeVersions(t, c.ListenAddrs(), serverOf(t)+".public.items", false)) < 12 { // log[1] produced, not committed
			if time.Now().After(deadline) {
				t.Fatal("the second batch was never produced")
			}
			time.Sleep(20 * time.Millisecond)
		}
		exactlyOnce(t, c.ListenAddrs(), log[:1])
		select {
		case err := <-done:
			t.Fatalf("Write returned %v before the commit", err)
		default:
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		exactlyOnce(t, c.ListenAddrs(), log)
	})

	// A produce failure in the middle of a transaction aborts it: nothing
	// of it is visible, Write fails, and the retry commits it once.
	t.Run("AbortedInvisible", func(t *testing.T) {
		c, reg := newCluster(t)
		var fail atomic.Int32
		c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if fail.Load() > 0 {
				fail.Add(-1)
				return produceErr(req, kerr.InvalidRecord.Code), nil, true
			}
			return nil, nil, false
		})
		s := txnSink(t, c.ListenAddrs(), reg, func(o *Options) { o.CreateTopics.Partitions = 1 })
		log := txnBatches(2, 6, 10)
		if err := s.Write(t.Context(), log[0]); err != nil {
			t.Fatal(err)
		}
		fail.Store(1)
		err := s.Write(t.Context(), log[1])
		var be *pipeline.BatchError
		if err == nil {
			t.Fatal("write with a refused produce returned nil")
		}
		if errors.As(err, &be) {
			// The refused records come back as permanent failures, the
			// others were committed in a second transaction.
			refused := map[int]bool{}
			for _, f := range be.Failed {
				refused[f.Index] = true
			}
			var kept []pipeline.Record
			for i, r := range log[1] {
				if !refused[i] {
					kept = append(kept, r)
				}
			}
			exactlyOnce(t, c.ListenAddrs(), [][]pipeline.Record{log[0], kept})
			return
		}
		exactlyOnce(t, c.ListenAddrs(), log[:1])
		if err := s.Write(t.Context(), log[1]); err != nil {
			t.Fatal(err)
		}
		exactlyOnce(t, c.ListenAddrs(), log)
	})

	// Cancelling Write aborts the transaction and returns ctx.Err().
	t.Run("CancelAborts", func(t *testing.T) {
		c, reg := newCluster(t)
		var slow atomic.Bool
		release := make(chan struct{})
		c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if slow.Load() {
				c.SleepControl(func() { <-release })
			}
			return nil, nil, false
		})
		s := txnSink(t, c.ListenAddrs(), reg, nil)
		log := txnBatches(2, 5, 10)
		if err := s.Write(t.Context(), log[0]); err != nil {
			t.Fatal(err)
		}
		slow.Store(true)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Write(ctx, log[1]) }()
		time.Sleep(300 * time.Millisecond)
		cancel()
		time.Sleep(100 * time.Millisecond)
		slow.Store(false)
		close(release)
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Write returned %v", err)
		}
		exactlyOnce(t, c.ListenAddrs(), log[:1])
		if err := s.Write(t.Context(), log[1]); err != nil {
			t.Fatal(err)
		}
		exactlyOnce(t, c.ListenAddrs(), log)
	})
}

// TestTxnBroker runs the exactly-once tests against a real broker.
func TestTxnBroker(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	k := harness.KafkaT(t)
	t.Run("CrashReplay", func(t *testing.T) {
		reg, _ := registryFor(t)
		testTxnCrashReplay(t, k.Brokers(), reg)
	})
	t.Run("Fencing", func(t *testing.T) {
		reg, _ := registryFor(t)
		testTxnFencing(t, k.Brokers(), reg)
	})
	t.Run("Redo", func(t *testing.T) {
		reg, _ := registryFor(t)
		testTxnRedo(t, k.Brokers(), reg)
	})
	t.Run("SnapshotAboveStream", func(t *testing.T) {
		reg, _ := registryFor(t)
		testTxnSnapshotAboveStream(t, k.Brokers(), reg)
	})
	t.Run("NewGeneration", func(t *testing.T) {
		reg, _ := registryFor(t)
		testTxnNewGeneration(t, k.Brokers(), reg)
	})
	t.Run("JoinReplay", func(t *testing.T) {
		reg, _ := registryFor(t)
		testTxnJoinReplay(t, k.Brokers(), reg)
	})
}

func TestTxnOptions(t *testing.T) {
	o := Defaults([]string{"b:9092"}, "shop")
	o.Name, o.ExactlyOnce = "events", true
	if err := o.normalize(); err != nil {
		t.Fatal(err)
	}
	if o.Pipeline != "shop" || o.OffsetsTopic != "shop.sluice.offsets" || o.TransactionalID() != "sluice-shop-events" ||
		o.markKey() != "shop/events" {
		t.Errorf("pipeline %q, offsets topic %q, transactional id %q, key %q", o.Pipeline, o.OffsetsTopic, o.TransactionalID(), o.markKey())
	}
	o = Defaults([]string{"b:9092"}, "shop")
	o.ExactlyOnce, o.OffsetsTopic = true, "bad topic"
	if err := o.normalize(); err == nil {
		t.Error("invalid offsets topic accepted")
	}
	// Snapshot rows and truncates are never skipped; stream changes at or
	// below the mark are, unless the mark lists them for redo.
	st := txnState{has: true, hwm: pipeline.Version{0, 10, 0, 5}, redo: map[pipeline.Version]bool{{0, 10, 0, 2}: true}}
	for _, c := range []struct {
		op   pipeline.Op
		v    pipeline.Version
		skip bool
	}{
		{pipeline.OpUpdate, pipeline.Version{0, 10, 0, 5}, true},
		{pipeline.OpDelete, pipeline.Version{0, 9, 0, 7}, true},
		{pipeline.OpInsert, pipeline.Version{0, 10, 0, 6}, false},
		{pipeline.OpUpdate, pipeline.Version{0, 10, 0, 2}, false},
		{pipeline.OpRead, pipeline.Version{0, 10, 0, 1}, false},
		{pipeline.OpTruncate, pipeline.Version{0, 10, 0, 0}, false},
	} {
		if got := st.skip(&pipeline.Record{Op: c.op, Version: c.v}, nil); got != c.skip {
			t.Errorf("%s %v: skip %v, want %v", c.op, c.v, got, c.skip)
		}
	}
}

// A replay in a later generation (another server, or after a cut-short
// run) sorts above the mark: what the source's positions show within the
// mark's was committed and is skipped, except the rest of the mark's own
// transaction; nothing is skipped without positions to compare, or with
// permanent failures to hand back.
func TestSkipAcrossGenerationsByPosition(t *testing.T) {
	pos := func(n int) pipeline.Position { return pipeline.Position(fmt.Sprintf(`{"n":%d}`, n)) }
	covers := func(p, mark pipeline.Position) bool { return posN(json.RawMessage(p)) <= posN(json.RawMessage(mark)) }
	// The mark: the third change (index 4) of transaction 7, at n 70.
	st := txnState{has: true, hwm: pipeline.Version{1, 6000, 30, 4}, markPos: json.RawMessage(pos(70)), markTx: 7}
	for _, c := range []struct {
		name string
		r    pipeline.Record
		skip bool
	}{
		{"an earlier transaction replayed", pipeline.Record{Op: pipeline.OpUpdate, Version: pipeline.Version{2, 100, 9, 2}, TxID: 6, Pos: pos(60)}, true},
		{"the mark itself replayed", pipeline.Record{Op: pipeline.OpUpdate, Version: pipeline.Version{2, 100, 20, 4}, TxID: 7, Pos: pos(70)}, true},
		{"the rest of the mark's transaction", pipeline.Record{Op: pipeline.OpDelete, Version: pipeline.Version{2, 100, 20, 5}, TxID: 7, Pos: pos(70)}, false},
		{"a later transaction", pipeline.Record{Op: pipeline.OpInsert, Version: pipeline.Version{2, 100, 40, 2}, TxID: 8, Pos: pos(80)}, false},
		{"no position", pipeline.Record{Op: pipeline.OpInsert, Version: pipeline.Version{2, 100, 9, 2}, TxID: 6}, false},
		{"a snapshot row", pipeline.Record{Op: pipeline.OpRead, Version: pipeline.Version{2, 100, 0, 1}, Pos: pos(60)}, false},
	} {
		if got := st.skip(&c.r, covers); got != c.skip {
			t.Errorf("%s: skip %v, want %v", c.name, got, c.skip)
		}
		if c.skip && st.skip(&c.r, nil) {
			t.Errorf("%s: skipped without a way to compare positions", c.name)
		}
	}
	st.redo = map[pipeline.Version]bool{{1, 6000, 30, 3}: true}
	if st.skip(&pipeline.Record{Op: pipeline.OpUpdate, Version: pipeline.Version{2, 100, 9, 2}, TxID: 6, Pos: pos(60)}, covers) {
		t.Error("skipped by position while the mark lists permanent failures to hand back")
	}
}

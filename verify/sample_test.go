package verify

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

var sampleTable = &pipeline.Table{
	ID:      pipeline.TableID{Schema: "public", Table: "t"},
	Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "v", Type: pipeline.TypeString, Nullable: true}},
	KeyIdx:  []int{0},
}

// numMark is a position that is a plain number.
type numMark int64

func (m numMark) String() string { return strconv.FormatInt(int64(m), 10) }
func (m numMark) CoveredBy(cp pipeline.Position) (bool, error) {
	n, err := strconv.ParseInt(string(cp), 10, 64)
	return n >= int64(m), err
}

// sampleDB is a source database with a log position; onRead runs inside
// KeyRows after the rows are read (a commit racing the check).
type sampleDB struct {
	mu     sync.Mutex
	rows   map[int64]string
	pos    int64
	onRead func()
	reads  int
}

func (f *sampleDB) Tables() []pipeline.TableID { return []pipeline.TableID{sampleTable.ID} }
func (f *sampleDB) Scan(context.Context, pipeline.TableID, func(*pipeline.Table) error, func([]any) error) error {
	return fmt.Errorf("not used")
}
func (f *sampleDB) Now(context.Context) (Mark, error) { return numMark(f.pos), nil }
func (f *sampleDB) MarkOf(pos pipeline.Position) (Mark, error) {
	n, err := strconv.ParseInt(string(pos), 10, 64)
	return numMark(n), err
}
func (f *sampleDB) KeyRows(_ context.Context, _ pipeline.TableID, keys [][]any) (*pipeline.Table, [][]any, Mark, error) {
	f.mu.Lock()
	var out [][]any
	for _, k := range keys {
		if v, ok := f.rows[k[0].(int64)]; ok {
			out = append(out, []any{k[0], v})
		}
	}
	f.reads++
	hook := f.onRead
	f.onRead = nil
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return sampleTable, out, numMark(f.pos), nil
}

// sampleHeld is a sink's rows.
type sampleHeld struct {
	mu   sync.Mutex
	rows map[int64]string
}

func (f *sampleHeld) Rows(context.Context, *pipeline.Table) ([][]any, error) { return nil, nil }
func (f *sampleHeld) RowsByKey(_ context.Context, _ *pipeline.Table, keys [][]any) ([][]any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]any
	for _, k := range keys {
		if v, ok := f.rows[k[0].(int64)]; ok {
			out = append(out, []any{k[0], v})
		}
	}
	return out, nil
}

type countObs struct {
	mu                                     sync.Mutex
	checked, mismatches, inconclusive, drp int
}

func (c *countObs) Checked(_, _ string, n int) { c.mu.Lock(); c.checked += n; c.mu.Unlock() }
func (c *countObs) Mismatch(_, _ string)       { c.mu.Lock(); c.mismatches++; c.mu.Unlock() }
func (c *countObs) Inconclusive(_ string, n int) {
	c.mu.Lock()
	c.inconclusive += n
	c.mu.Unlock()
}
func (c *countObs) Dropped(n int) { c.mu.Lock(); c.drp += n; c.mu.Unlock() }

// world is a source, one sink and a sampler, with a pipeline that applies
// each change to the source, then (when deliver is true) to the sink.
type world struct {
	db   *sampleDB
	sink *sampleHeld
	s    *Sampler
	obs  *countObs
	now  time.Time
}

func newWorld(rate float64, maxPending int) *world {
	w := &world{db: &sampleDB{rows: map[int64]string{}}, sink: &sampleHeld{rows: map[int64]string{}}, obs: &countObs{}, now: time.Unix(1000, 0)}
	w.s = NewSampler(w.db, []NamedSink{{Name: "s", Sink: w.sink}, {Name: "plain", Sink: plainSink{}}},
		SampleOptions{Rate: rate, Delay: time.Second, MaxPending: maxPending}, w.obs, nil)
	w.s.now = func() time.Time { return w.now }
	return w
}

type plainSink struct{}

func (plainSink) Rows(context.Context, *pipeline.Table) ([][]any, error) { return nil, nil }

// commit changes key id to v (nil: delete) in the source and feeds it to
// the pipeline, which makes it durable in the sink unless lost.
func (w *world) commit(id int64, v any, lost bool) {
	w.db.mu.Lock()
	w.db.pos++
	pos := w.db.pos
	if v == nil {
		delete(w.db.rows, id)
	} else {
		w.db.rows[id] = v.(string)
	}
	w.db.mu.Unlock()
	rec := pipeline.Record{Op: pipeline.OpUpdate, Table: sampleTable, After: []any{id, v}, Pos: pipeline.Position(strconv.FormatInt(pos, 10))}
	if v == nil {
		rec = pipeline.Record{Op: pipeline.OpDelete, Table: sampleTable, Before: []any{id, nil}, Pos: rec.Pos}
	}
	w.s.Read(&pipeline.Batch{Records: []pipeline.Record{rec}, Pos: rec.Pos})
	if !lost {
		w.sink.mu.Lock()
		if v == nil {
			delete(w.sink.rows, id)
		} else {
			w.sink.rows[id] = v.(string)
		}
		w.sink.mu.Unlock()
	}
	w.s.Committed(rec.Pos)
}

func TestSamplerCountsEqualKeysAndMismatches(t *testing.T) {
	w := newWorld(1, 0)
	ctx := context.Background()
	for id := int64(1); id <= 20; id++ {
		w.commit(id, "v"+strconv.FormatInt(id, 10), id == 7) // the sink loses key 7's change
	}
	w.commit(3, nil, false) // a delete: absent on both sides is equal
	w.commit(4, nil, true)  // a lost delete: the sink still holds the row
	w.commit(5, "x", false) // changed again before the check: checked once, at "x"
	if err := w.s.CheckDue(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if w.obs.checked != 0 {
		t.Fatalf("keys checked before Delay passed: %d", w.obs.checked)
	}
	w.now = w.now.Add(2 * time.Second)
	if err := w.s.CheckDue(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if w.obs.checked != 18 || w.obs.mismatches != 2 || w.s.Pending() != 0 {
		t.Fatalf("checked %d, mismatches %d, pending %d; want 18 equal, 2 differing (keys 4 and 7), none pending",
			w.obs.checked, w.obs.mismatches, w.s.Pending())
	}
}

func TestSamplerWaitsForTheCheckpoint(t *testing.T) {
	w := newWorld(1, 0)
	w.s.opts.Settle = 200 * time.Millisecond
	ctx := context.Background()
	w.commit(1, "a", false)
	// A change read but not yet checkpointed is not due, and key 1's check
	// waits for a checkpoint past its source read, which has seen it.
	w.db.pos++
	w.db.rows[2] = "b"
	w.s.Read(&pipeline.Batch{Records: []pipeline.Record{{Op: pipeline.OpInsert, Table: sampleTable, After: []any{int64(2), "b"}, Pos: pipeline.Position("2")}}})
	w.sink.rows[2] = "b"
	w.now = w.now.Add(2 * time.Second)
	if err := w.s.CheckDue(ctx, 100); err == nil || w.obs.checked != 0 || w.s.Pending() != 2 {
		t.Fatalf("error %v, checked %d, pending %d; want the checkpoint wait to time out with nothing settled", err, w.obs.checked, w.s.Pending())
	}
	w.s.Committed(pipeline.Position("2"))
	if err := w.s.CheckDue(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if w.obs.checked != 2 || w.obs.mismatches != 0 || w.s.Pending() != 0 {
		t.Fatalf("after the checkpoint: checked %d, mismatches %d, pending %d", w.obs.checked, w.obs.mismatches, w.s.Pending())
	}
}

// A commit that lands between the check's source read and its sink read
// makes the sink newer than the source read: inconclusive, never a
// mismatch, and the key is checked again at its newest change.
func TestSamplerChangeDuringCheckIsInconclusive(t *testing.T) {
	w := newWorld(1, 0)
	ctx := context.Background()
	w.commit(1, "a", false)
	w.now = w.now.Add(2 * time.Second)
	w.db.onRead = func() { w.commit(1, "b", false) }
	if err := w.s.CheckDue(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if w.obs.mismatches != 0 || w.obs.inconclusive != 1 || w.s.Pending() != 1 {
		t.Fatalf("mismatches %d, inconclusive %d, pending %d; want 0, 1, 1", w.obs.mismatches, w.obs.inconclusive, w.s.Pending())
	}
	w.now = w.now.Add(2 * time.Second)
	if err := w.s.CheckDue(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if w.obs.mismatches != 0 || w.obs.checked != 1 || w.s.Pending() != 0 {
		t.Fatalf("second round: mismatches %d, checked %d, pending %d", w.obs.mismatches, w.obs.checked, w.s.Pending())
	}
}

// A commit the source read sees before the pipeline has read it: the
// check waits for the checkpoint past the read, by which time the
// pipeline has read the change, so the key is inconclusive.
func TestSamplerCommitAheadOfThePipelineIsInconclusive(t *testing.T) {
	w := newWorld(1, 0)
	ctx := context.Background()
	w.commit(1, "a", false)
	w.now = w.now.Add(2 * time.Second)
	w.db.mu.Lock()
	w.db.rows[1] = "b" // committed, not yet read by the pipeline
	w.db.pos++
	w.db.mu.Unlock()
	go func() {
		// The pipeline catches up while the check waits for the checkpoint.
		for w.db.readsNow() == 0 {
			time.Sleep(time.Millisecond)
		}
		rec := pipeline.Record{Op: pipeline.OpUpdate, Table: sampleTable, After: []any{int64(1), "b"}, Pos: pipeline.Position("2")}
		w.s.Read(&pipeline.Batch{Records: []pipeline.Record{rec}, Pos: rec.Pos})
		w.sink.mu.Lock()
		w.sink.rows[1] = "b"
		w.sink.mu.Unlock()
		w.s.Committed(rec.Pos)
	}()
	if err := w.s.CheckDue(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if w.obs.mismatches != 0 || w.obs.inconclusive != 1 {
		t.Fatalf("mismatches %d, inconclusive %d; want 0 and 1", w.obs.mismatches, w.obs.inconclusive)
	}
}

func (f *sampleDB) readsNow() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func TestSamplerBounds(t *testing.T) {
	w := newWorld(1, 5)
	for id := int64(1); id <= 12; id++ {
		w.commit(id, "v", false)
	}
	if w.s.Pending() != 5 || w.obs.drp != 7 {
		t.Fatalf("pending %d, dropped %d; want 5 and 7", w.s.Pending(), w.obs.drp)
	}
	w.now = w.now.Add(2 * time.Second)
	if err := w.s.CheckDue(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if w.obs.checked != 2 || w.s.Pending() != 3 {
		t.Fatalf("a budget of 2 checked %d and left %d pending", w.obs.checked, w.s.Pending())
	}
	// A rate of zero samples nothing.
	z := newWorld(0, 0)
	for id := int64(1); id <= 100; id++ {
		z.commit(id, "v", false)
	}
	if z.s.Pending() != 0 {
		t.Fatalf("rate 0 queued %d keys", z.s.Pending())
	}
}

// BenchmarkSamplerRead is the per-record cost continuous verification adds
// to the read loop, at a 1% sample rate with keys waiting (the hash of
// every record is then computed), against the same batch with no sampler.
func BenchmarkSamplerRead(b *testing.B) {
	recs := make([]pipeline.Record, 1000)
	for i := range recs {
		recs[i] = pipeline.Record{Op: pipeline.OpUpdate, Table: sampleTable, After: []any{int64(i), "value"}, Pos: pipeline.Position("1")}
	}
	batch := &pipeline.Batch{Records: recs, Pos: pipeline.Position("1")}
	w := newWorld(0.01, 0)
	b.ResetTimer()
	for range b.N {
		w.s.Read(batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

package window

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
)

// engineUnderTest is what the crash test drives: Engine or Sessions.
type engineUnderTest interface {
	Upsert(Input) *Late
	Delete(row string, version pipeline.Version)
	Advance(wm int64) []Emission
	Flush(tx *bbolt.Tx) error
	Reemit()
	RetractPrior(prior Input, version pipeline.Version)
}

// A run that crashes at random moments — its state written after every
// batch, then loaded back, the results held written again, and the
// changes since an older checkpoint replayed — emits the same final
// results, with the same versions, as a run that never stopped.
func TestStateSurvivesCrashesAndReplays(t *testing.T) {
	crashAndReplay(t, 3, func() *Engine { return ordersEngine(30 * sec) },
		func(tx *bbolt.Tx) (*Engine, error) { return Load(tx, ordersEngine(30*sec).opts) })
}

func TestSessionsSurviveCrashesAndReplays(t *testing.T) {
	crashAndReplay(t, 7, func() *Sessions { return sessionsEngine(30 * sec) },
		func(tx *bbolt.Tx) (*Sessions, error) { return LoadSessions(tx, sessionsEngine(30*sec).opts) })
}

// late: correct, with no lateness: many changes reach windows past it,
// and rows no longer held are retracted from their before images.
func TestRetainedWindowsSurviveCrashesAndReplays(t *testing.T) {
	opts := EngineOptions{Spec: Tumbling(time.Minute), Retain: 3600 * sec, Aggs: ordersEngine(0).opts.Aggs}
	crashAndReplay(t, 11, func() *Engine { return NewEngine(opts) },
		func(tx *bbolt.Tx) (*Engine, error) { return Load(tx, opts) })
}

// Hopping windows: a row is in several windows and logged in the
// latest-ending one; rows moved to earlier windows leave gone marks.
func TestHoppingStateSurvivesCrashesAndReplays(t *testing.T) {
	opts := EngineOptions{Spec: Spec{Size: time.Minute, Advance: 20 * time.Second}, Lateness: 30 * sec, Aggs: ordersEngine(0).opts.Aggs}
	crashAndReplay(t, 13, func() *Engine { return NewEngine(opts) },
		func(tx *bbolt.Tx) (*Engine, error) { return Load(tx, opts) })
}

// Logs rewritten at almost every write (compactLogs) give the same
// results.
func TestCompactedLogsSurviveCrashesAndReplays(t *testing.T) {
	defer func(s int) { logSlack = s }(logSlack)
	logSlack = 1
	opts := EngineOptions{Spec: Spec{Size: time.Minute, Advance: 20 * time.Second}, Lateness: 30 * sec, Aggs: ordersEngine(0).opts.Aggs}
	crashAndReplay(t, 17, func() *Engine { return NewEngine(opts) },
		func(tx *bbolt.Tx) (*Engine, error) { return Load(tx, opts) })
	crashAndReplay(t, 19, func() *Engine { return ordersEngine(30 * sec) },
		func(tx *bbolt.Tx) (*Engine, error) { return Load(tx, ordersEngine(30*sec).opts) })
}

func crashAndReplay[E engineUnderTest](t *testing.T, seed uint64, fresh func() E, load func(*bbolt.Tx) (E, error)) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for trial := range 30 {
		// A log of batches: upserts, moves and deletes over 30 rows, event
		// times increasing slowly, some late within a lateness of 30 s.
		type change struct {
			in     Input
			del    bool
			before *Input // the row as the source had it: an update's or delete's before image
		}
		last := map[string]Input{}
		var batches [][]change
		ver, clock := uint64(0), int64(0)
		for range 40 {
			var b []change
			for range 1 + rng.IntN(6) {
				ver++
				clock += int64(rng.IntN(4)) * sec
				tm := clock - int64(rng.IntN(25))*sec
				row := fmt.Sprint("r", rng.IntN(30))
				in := order(row, tm, fmt.Sprint("g", rng.IntN(3)), fmt.Sprint(rng.IntN(1000)), ver)
				c := change{in: in, del: rng.IntN(5) == 0}
				if prev, ok := last[row]; ok {
					c.before = &prev
				}
				if c.del {
					delete(last, row)
				} else {
					last[row] = in
				}
				b = append(b, c)
			}
			batches = append(batches, b)
		}
		// applied is the newest version applied, kept with the state: a
		// replayed change at or below it is skipped, as the operator does.
		var applied, appliedStored pipeline.Version
		apply := func(e E, b []change) []Emission {
			maxT := int64(NoWatermark)
			for _, c := range b {
				if !applied.Less(c.in.Version) {
					continue
				}
				applied = c.in.Version
				if c.before != nil {
					e.RetractPrior(*c.before, c.in.Version)
				}
				if c.del {
					e.Delete(c.in.Row, c.in.Version)
				} else {
					e.Upsert(c.in)
				}
				maxT = max(maxT, c.in.Time)
			}
			if maxT == NoWatermark {
				return e.Advance(NoWatermark) // every change a replay: the watermark stays
			}
			return e.Advance(maxT - 20*sec)
		}
		// What a sink holds at the end: each key's newest result (a delete
		// is no row; Reemit may delete a row never written).
		final := func(into map[string]string, es []Emission) {
			for _, em := range es {
				k := fmt.Sprint(em.Window, em.Group)
				if em.Delete {
					delete(into, k)
					continue
				}
				into[k] = fmt.Sprint(em.Values, em.Version)
			}
		}
		want := map[string]string{}
		ref := fresh()
		for _, b := range batches {
			final(want, apply(ref, b))
		}
		final(want, ref.Advance(1<<62))

		applied = pipeline.Version{}
		db, err := bbolt.Open(filepath.Join(t.TempDir(), "w.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		e := fresh()
		checkpoint, crashes := 0, 0 // batches before the checkpoint are acknowledged: never read again
		for i := 0; i < len(batches); i++ {
			final(got, apply(e, batches[i]))
			if err := db.Update(e.Flush); err != nil {
				t.Fatal(err)
			}
			appliedStored = applied
			if rng.IntN(3) == 0 {
				checkpoint = i + 1 - rng.IntN(min(3, i+1)) // may trail the state
			}
			if rng.IntN(6) == 0 {
				crashes++
				err = db.View(func(tx *bbolt.Tx) error {
					var err error
					e, err = load(tx)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				e.Reemit()
				applied = appliedStored
				i = checkpoint - 1
			}
		}
		final(got, e.Advance(1<<62))
		db.Close()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d (%d crashes): results differ\n got %v\nwant %v", trial, crashes, got, want)
		}
	}
}

// A state written before the row logs (one key per row) loads into the
// same engine, and its first write moves the rows into the logs.
func TestStateWithARowPerKeyMovesIntoTheLogs(t *testing.T) {
	opts := EngineOptions{Spec: Spec{Size: time.Minute, Advance: 20 * time.Second}, Lateness: 30 * sec, Aggs: ordersEngine(0).opts.Aggs}
	rng := rand.New(rand.NewPCG(5, 6))
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "w.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := NewEngine(opts)
	clock := int64(0)
	for i := range 300 {
		clock += int64(rng.IntN(2)) * sec
		row := fmt.Sprint("r", rng.IntN(40))
		if rng.IntN(6) == 0 {
			e.Delete(row, v(uint64(i+1)))
		} else {
			e.Upsert(order(row, clock-int64(rng.IntN(20))*sec, fmt.Sprint("g", rng.IntN(3)), fmt.Sprint(rng.IntN(100)), uint64(i+1)))
		}
		if i%10 == 0 {
			e.Advance(clock - 10*sec)
		}
	}
	if err := db.Update(e.Flush); err != nil {
		t.Fatal(err)
	}
	load := func() *Engine {
		var l *Engine
		if err := db.View(func(tx *bbolt.Tx) (err error) { l, err = Load(tx, opts); return err }); err != nil {
			t.Fatal(err)
		}
		return l
	}
	want := show(load().Advance(1 << 62))
	if len(want) == 0 {
		t.Fatal("no results to compare")
	}
	// The same state as the earlier layout wrote it.
	err = db.Update(func(tx *bbolt.Tx) error {
		held := load()
		rows := tx.Bucket(bucketRows)
		for row, c := range held.rows {
			b, err := c.appendTo(nil)
			if err != nil {
				return err
			}
			if err := rows.Put([]byte(row), b); err != nil {
				return err
			}
		}
		return tx.DeleteBucket(bucketRowLog)
	})
	if err != nil {
		t.Fatal(err)
	}
	legacy := load()
	if !legacy.legacyRows {
		t.Fatal("the rows bucket was not read")
	}
	if err := db.Update(legacy.Flush); err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bbolt.Tx) error {
		if k, _ := tx.Bucket(bucketRows).Cursor().First(); k != nil {
			t.Errorf("row %q still in the rows bucket after a write", k)
		}
		if logs := tx.Bucket(bucketRowLog); logs == nil || logs.Stats().KeyN == 0 {
			t.Error("no row log after a write")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := show(load().Advance(1 << 62)); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the move into the logs:\n got %v\nwant %v", got, want)
	}
}

// A write holds what changed since the last one: with nothing changed it
// adds no row log, and one changed row adds one entry.
func TestAWriteHoldsOnlyWhatChanged(t *testing.T) {
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "w.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := ordersEngine(0)
	for i := range 100 {
		e.Upsert(order(fmt.Sprint("r", i), int64(i)*sec/10, fmt.Sprint("g", i%7), "1.5", uint64(i+1)))
	}
	count := func() (logs, entries int) {
		err := db.View(func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketRowLog).ForEach(func(k, v []byte) error {
				logs++
				r := binform.NewReader(v)
				for r.Len() > 0 {
					r.Bytes()
					r.Bytes()
					entries++
				}
				return r.Err()
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return logs, entries
	}
	for i, want := range [][2]int{{1, 100}, {1, 100}, {2, 101}} {
		if i == 2 {
			e.Upsert(order("r5", 2*sec, "g1", "2.5", 1000))
		}
		if err := db.Update(e.Flush); err != nil {
			t.Fatal(err)
		}
		if logs, entries := count(); logs != want[0] || entries != want[1] {
			t.Fatalf("write %d: %d logs with %d entries, want %d with %d", i+1, logs, entries, want[0], want[1])
		}
	}
}

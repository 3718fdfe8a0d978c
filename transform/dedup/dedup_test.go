package dedup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/scope"
	"github.com/sluice-cdc/sluice/transform/state"
)

var outbox = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "outbox"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "event_id", Type: pipeline.TypeString, Nullable: true},
		{Name: "n", Type: pipeline.TypeInt64, Nullable: true},
	},
	KeyIdx: []int{0},
}

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

func ver(n uint64) pipeline.Version { return pipeline.Version{0, n, 0, 1} }

// rec is a change of outbox row id with event ev ("" is NULL) at t0+at.
func rec(op pipeline.Op, id int64, ev string, at time.Duration, v uint64) pipeline.Record {
	var e any = ev
	if ev == "" {
		e = nil
	}
	row := []any{id, e, int64(v)}
	r := pipeline.Record{Op: op, Table: outbox, Version: ver(v), EventTime: t0.Add(at)}
	if op == pipeline.OpDelete {
		r.Before = row
	} else {
		r.After = row
	}
	return r
}

func options(dir string, dropped *int) Options {
	tables, _ := scope.NewTables([]string{"public.outbox"})
	return Options{Name: "transforms[0].dedup", Tables: tables, Key: "after.event_id", TTL: time.Minute, Dir: dir,
		Policy: scope.DLQ, Dropped: func(n int) { *dropped += n }}
}

func open(t *testing.T, o Options, resumed bool) *Dedup {
	t.Helper()
	d, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Begin(context.Background(), resumed); err != nil {
		d.Close()
		t.Fatal(err)
	}
	return d
}

// process runs a batch, returning what passed and what was rejected.
func process(t *testing.T, d *Dedup, in []pipeline.Record) ([]pipeline.Record, *pipeline.Rejects) {
	t.Helper()
	out, err := d.Process(context.Background(), slices.Clone(in))
	var rj *pipeline.Rejects
	if err != nil && !errors.As(err, &rj) {
		t.Fatal(err)
	}
	return out, rj
}

// passed renders the records out of a batch: op, row, version.
func passed(t *testing.T, d *Dedup, in ...pipeline.Record) ([]string, *pipeline.Rejects) {
	t.Helper()
	out, rj := process(t, d, in)
	var got []string
	for _, r := range out {
		img := r.After
		if img == nil {
			img = r.Before
		}
		if img == nil {
			got = append(got, r.Op.String())
			continue
		}
		got = append(got, fmt.Sprintf("%s %d v%d", r.Op, img[0], r.Version[1]))
	}
	return got, rj
}

func TestDuplicatesAreDroppedWithTheirLaterChanges(t *testing.T) {
	dropped := 0
	dir := t.TempDir()
	o := options(dir, &dropped)
	d := open(t, o, false)
	got, _ := passed(t, d,
		rec(pipeline.OpInsert, 1, "A", 0, 1),
		rec(pipeline.OpInsert, 2, "A", time.Second, 2), // a duplicate of event A
		rec(pipeline.OpInsert, 3, "B", time.Second, 3),
		rec(pipeline.OpUpdate, 2, "A", 2*time.Second, 4), // the duplicate's later changes
		rec(pipeline.OpDelete, 2, "A", 3*time.Second, 5),
		rec(pipeline.OpUpdate, 1, "A", 3*time.Second, 6), // the row that holds A
		rec(pipeline.OpInsert, 4, "", 3*time.Second, 7),  // no key
		pipeline.Record{Op: pipeline.OpHeartbeat, EventTime: t0.Add(4 * time.Second)})
	if want := []string{"c 1 v1", "c 3 v3", "u 1 v6", "c 4 v7", pipeline.OpHeartbeat.String()}; !reflect.DeepEqual(got, want) {
		t.Fatalf("first batch: %v, want %v", got, want)
	}
	if dropped != 3 {
		t.Fatalf("dropped %d, want 3", dropped)
	}
	// The row that held A is deleted (an outbox row is, right after it
	// is written): A is still held until a minute after its last change.
	got, _ = passed(t, d,
		rec(pipeline.OpDelete, 1, "A", 10*time.Second, 8),
		rec(pipeline.OpInsert, 5, "A", 62*time.Second, 9),  // within the TTL of row 1's update at 3 s
		rec(pipeline.OpInsert, 6, "A", 64*time.Second, 10), // past it: a new event A
		rec(pipeline.OpInsert, 7, "B", 64*time.Second, 11)) // B: held by row 3 since 1 s, past its TTL
	if want := []string{"d 1 v8", "c 6 v10", "c 7 v11"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("second batch: %v, want %v", got, want)
	}
	// Kill and resume: a replay of the first batch decides as before.
	d.Close()
	d = open(t, o, true)
	got, _ = passed(t, d, rec(pipeline.OpInsert, 6, "A", 64*time.Second, 10), rec(pipeline.OpInsert, 5, "A", 62*time.Second, 9))
	if want := []string{"c 6 v10"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replay after a restart: %v, want %v", got, want)
	}
	d.Close()
	// Without a checkpoint the state starts over.
	d = open(t, o, false)
	defer d.Close()
	got, _ = passed(t, d, rec(pipeline.OpInsert, 5, "A", 62*time.Second, 9))
	if want := []string{"c 5 v9"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after starting over: %v, want %v", got, want)
	}
}

// A key that cannot be evaluated sends its record to the dead-letter
// queue; tables it does not apply to pass untouched.
func TestKeyErrorsAndOtherTables(t *testing.T) {
	dropped := 0
	o := options(t.TempDir(), &dropped)
	o.Key = `after.event_id + "x" ?? "none"`
	d := open(t, o, false)
	defer d.Close()
	other := rec(pipeline.OpInsert, 1, "A", 0, 1)
	other.Table = &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "orders"}, Columns: outbox.Columns, KeyIdx: []int{0}}
	got, rj := passed(t, d, other, rec(pipeline.OpInsert, 2, "A", 0, 2), rec(pipeline.OpInsert, 3, "", 0, 3))
	if want := []string{"c 1 v1", "c 2 v2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("passed %v, want %v", got, want)
	}
	if rj == nil || len(rj.Records) != 1 || rj.Records[0].Record.Version != ver(3) || !strings.Contains(rj.Records[0].Err.Error(), "transforms[0].dedup") {
		t.Fatalf("rejects: %+v", rj)
	}
}

// Effectively-once: batches of events written twice (by rows of their
// own), processed with kills at random moments and replays from an older
// checkpoint, pass what a run without kills passes: per event, its first
// row and that row's changes.
func TestKillsAndReplaysPassWhatOneRunPasses(t *testing.T) {
	replays(t, *replayTrials, false)
}

// D4: a restart that comes back on another server replays the changes
// after the checkpoint a generation up, with that server's positions:
// they get the decisions the first run made, as on the same server.
func TestReplaysFromAnotherServerPassWhatOneRunPasses(t *testing.T) {
	replays(t, *replayTrials, true)
}

var replayTrials = flag.Int("replay-trials", 100, "random workloads each replay test runs")

// replays runs trials random workloads of inserts, updates and deletes
// of rows that share events, in transactions of one to three changes,
// once straight through and once with kills that replay from the last
// checkpoint (on another server when failovers), and requires the same
// records to pass.
func replays(t *testing.T, trials int, failovers bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range trials {
		var batches [][]pipeline.Record
		tx, clock, id := uint64(0), time.Duration(0), int64(0)
		holder := map[int64]bool{}
		var rows []int64
		for range 25 {
			var b []pipeline.Record
			for range 1 + rng.IntN(4) {
				tx++
				clock += time.Duration(rng.IntN(10)) * time.Second
				for i := range 1 + rng.IntN(3) {
					var r pipeline.Record
					switch {
					case len(rows) > 0 && rng.IntN(2) == 0:
						row := rows[rng.IntN(len(rows))]
						op := pipeline.OpUpdate
						if rng.IntN(2) == 0 {
							op = pipeline.OpDelete
						}
						r = rec(op, row, fmt.Sprint("e", row/2), clock, tx)
					default:
						id++
						rows = append(rows, id)
						holder[id] = id%2 == 0 // rows 2k and 2k+1 carry event k
						r = rec(pipeline.OpInsert, id, fmt.Sprint("e", id/2), clock, tx)
					}
					r.TxID, r.Version[3] = tx, uint64(2+i)
					b = append(b, r)
				}
			}
			batches = append(batches, b)
		}
		run := func(kills bool) map[string]bool {
			dropped := 0
			o := options(t.TempDir(), &dropped)
			d := open(t, o, false)
			// What each batch passed the last time it ran: a kill loses
			// what the batches after the checkpoint passed (their writes
			// may not have been durable), so the replay must pass it again.
			outs := map[int][]string{}
			// runStart is the first batch of this run: Checkpointed counts
			// the run's batches.
			checkpoint, runStart, server := 0, 0, uint64(0)
			for i := 0; i < len(batches); i++ {
				outs[i] = passedOn(t, d, server, batches[i])
				if rng.IntN(3) == 0 {
					// A stored checkpoint never moves back; the dedup learns
					// of it and forgets what no replay can ask for.
					if c := i + 1 - rng.IntN(min(3, i+1)); c > checkpoint {
						checkpoint = c
						if c > runStart {
							d.Checkpointed(uint64(c - runStart))
						}
					}
				}
				if kills && rng.IntN(5) == 0 {
					d.Close()
					d = open(t, o, true)
					if failovers && rng.IntN(2) == 0 {
						server++
					}
					for j := checkpoint; j <= i; j++ {
						delete(outs, j)
					}
					i, runStart = checkpoint-1, checkpoint
				}
			}
			d.Close()
			out := map[string]bool{}
			for _, got := range outs {
				for _, g := range got {
					out[g] = true
				}
			}
			return out
		}
		want, got := run(false), run(true)
		if !reflect.DeepEqual(got, want) {
			var diff []string
			for g := range want {
				if !got[g] {
					diff = append(diff, "missing "+g)
				}
			}
			for g := range got {
				if !want[g] {
					diff = append(diff, "extra "+g)
				}
			}
			slices.Sort(diff)
			t.Fatalf("trial %d: with kills %d records passed, without %d: %v", trial, len(got), len(want), diff)
		}
		// Every passed insert is its event's first row.
		for g := range want {
			var row int64
			if _, err := fmt.Sscanf(g, "c %d", &row); err == nil && !holder[row] && row != 1 {
				t.Fatalf("trial %d: the duplicate row %d passed", trial, row)
			}
		}
	}
}

// onServer is the batch as server n streams it: generation n, and
// positions of its own (each server's binlog starts elsewhere); the
// transaction ids and indexes are the ones every server shares.
func onServer(n uint64, in []pipeline.Record) []pipeline.Record {
	out := slices.Clone(in)
	for i := range out {
		out[i].Version[0] = n
		out[i].Version[1] += 1_000_000 * n
		out[i].Version[2] = 7 * n
	}
	return out
}

// passedOn renders what passes of the batch streamed by server n by what
// is the same on every server: op, row, transaction and index.
func passedOn(t *testing.T, d *Dedup, n uint64, in []pipeline.Record) []string {
	t.Helper()
	out, _ := process(t, d, onServer(n, in))
	var got []string
	for _, r := range out {
		img := r.After
		if img == nil {
			img = r.Before
		}
		got = append(got, fmt.Sprintf("%s %d tx%d.%d", r.Op, img[0], r.TxID, r.Version[3]))
	}
	return got
}

// D2: a write sweeps no key a change after the last stored checkpoint
// could still find: a replay after a restart finds an event's key even
// when a later change, before the crash, was past its TTL. Once a
// checkpoint covers that later change, the key goes.
func TestKeysAReplayCanFindAreNotSwept(t *testing.T) {
	dropped := 0
	o := options(t.TempDir(), &dropped)
	d := open(t, o, false)
	passed(t, d, rec(pipeline.OpInsert, 1, "E", 0, 1))             // batch 1: row 1 holds E until 1m
	passed(t, d, rec(pipeline.OpInsert, 9, "F", 2*time.Minute, 3)) // batch 2: past E's TTL
	d.Close()                                                      // a kill before any checkpoint
	d = open(t, o, true)
	defer d.Close()
	// The replay: a duplicate of E written at 30 s (between the two
	// batches) is dropped, as it was in the first run.
	if got, _ := passed(t, d, rec(pipeline.OpInsert, 2, "E", 30*time.Second, 2), rec(pipeline.OpInsert, 9, "F", 2*time.Minute, 3)); !reflect.DeepEqual(got, []string{"c 9 v3"}) {
		t.Fatalf("replay: %v", got)
	}
	seenKeys := func() int {
		n := 0
		err := d.st.View(time.Time{}, func(tx *state.Tx) error {
			k, err := tx.Space(spaceSeen)
			if err != nil {
				return err
			}
			n = k.Len()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	passed(t, d, rec(pipeline.OpInsert, 10, "G", 3*time.Minute, 4))
	if n := seenKeys(); n != 3 {
		t.Fatalf("%d keys before a checkpoint covers the replayed batch, want E, F and G", n)
	}
	// A checkpoint covers both batches of this run: the horizon is the
	// second's earliest change (3 m), so the next write sweeps E (expired
	// at 1 m) and F (at 3 m), and keeps G.
	d.Checkpointed(2)
	passed(t, d, rec(pipeline.OpInsert, 11, "H", 4*time.Minute, 5))
	if n := seenKeys(); n != 2 {
		t.Fatalf("%d keys after a checkpoint covering both batches, want G and H", n)
	}
}

// D3: a replay gets the decisions the first run made, although the state
// holds what later changes did. Row 11 held event 5 and was deleted once
// its mark had run out; row 12 then took the event and row 11 came back
// as its duplicate, renewing the mark. Deciding the replayed delete from
// that state would drop it, and the sinks would keep row 11 for good.
func TestAReplayGetsTheDecisionsTheFirstRunMade(t *testing.T) {
	dropped := 0
	o := options(t.TempDir(), &dropped)
	d := open(t, o, false)
	batches := [][]pipeline.Record{
		{rec(pipeline.OpInsert, 10, "e5", 0, 1)},
		{rec(pipeline.OpInsert, 11, "e5", 100*time.Second, 2)}, // row 10's hold ran out: row 11 holds e5
		{rec(pipeline.OpDelete, 11, "e5", 110*time.Second, 3)},
		{rec(pipeline.OpInsert, 12, "e5", 200*time.Second, 4)}, // row 11's hold ran out: row 12 holds e5
		{rec(pipeline.OpUpdate, 11, "e5", 210*time.Second, 5)}, // a duplicate of row 12's
	}
	var first []string
	for i, b := range batches {
		got, _ := passed(t, d, b...)
		first = append(first, got...)
		if i == 1 {
			d.Checkpointed(2)
		}
	}
	if want := []string{"c 10 v1", "c 11 v2", "d 11 v3", "c 12 v4"}; !slices.Equal(first, want) {
		t.Fatalf("first run passed %v, want %v", first, want)
	}
	// Killed: the replay starts after the checkpoint.
	d.Close()
	d = open(t, o, true)
	defer d.Close()
	var again []string
	for _, b := range batches[2:] {
		got, _ := passed(t, d, b...)
		again = append(again, got...)
	}
	if want := []string{"d 11 v3", "c 12 v4"}; !slices.Equal(again, want) {
		t.Fatalf("the replay passed %v, want %v (as the first run)", again, want)
	}
}

// D4: the same replay from another server (a generation up, with
// positions of its own) gets the decisions the first run made too.
func TestAReplayFromAnotherServerGetsTheDecisionsTheFirstRunMade(t *testing.T) {
	dropped := 0
	o := options(t.TempDir(), &dropped)
	d := open(t, o, false)
	batches := [][]pipeline.Record{
		{rec(pipeline.OpInsert, 10, "e5", 0, 1)},
		{rec(pipeline.OpInsert, 11, "e5", 100*time.Second, 2)},
		{rec(pipeline.OpDelete, 11, "e5", 110*time.Second, 3)},
		{rec(pipeline.OpInsert, 12, "e5", 200*time.Second, 4)},
		{rec(pipeline.OpUpdate, 11, "e5", 210*time.Second, 5)},
		{rec(pipeline.OpInsert, 13, "e7", 220*time.Second, 6)}, // lost in the failover: no other server has it
	}
	for _, b := range batches {
		b[0].TxID, b[0].Version[3] = b[0].Version[1], 2
	}
	var first []string
	for i, b := range batches {
		first = append(first, passedOn(t, d, 1, b)...)
		if i == 1 {
			d.Checkpointed(2)
		}
	}
	if want := []string{"c 10 tx1.2", "c 11 tx2.2", "d 11 tx3.2", "c 12 tx4.2", "c 13 tx6.2"}; !slices.Equal(first, want) {
		t.Fatalf("first run passed %v, want %v", first, want)
	}
	// Killed, and back on another server: generation 2.
	d.Close()
	d = open(t, o, true)
	var again []string
	for _, b := range batches[2:4] {
		again = append(again, passedOn(t, d, 2, b)...)
	}
	// Killed again before the last change, and back on the first
	// server's successor: generation 3 replays all three.
	d.Close()
	d = open(t, o, true)
	defer d.Close()
	again = nil
	for _, b := range batches[2:5] {
		again = append(again, passedOn(t, d, 3, b)...)
	}
	if want := []string{"d 11 tx3.2", "c 12 tx4.2"}; !slices.Equal(again, want) {
		t.Fatalf("the replay from another server passed %v, want %v (as the first run)", again, want)
	}
	// What was not replayed (the lost change's decision) is still
	// carried, until a checkpoint of the new generation covers the
	// replay.
	if d.carried[identity(pipeline.Version{0, 0, 0, 2}, rowKey(&batches[5][0]), change(nil, &batches[5][0]))].key == nil {
		t.Fatalf("the lost change's decision is not carried: %d are", len(d.carried))
	}
	// A checkpoint that covers part of the replay forgets nothing of the
	// earlier generations: their versions all sort below the new
	// generation's floor, replayed yet or not. Once one covers the first
	// change decided anew (the replay is over before it), they go.
	d.Checkpointed(1)
	passedOn(t, d, 3, []pipeline.Record{rec(pipeline.OpInsert, 20, "e9", 300*time.Second, 7)}) // batch 4: decided anew
	if d.carried == nil {
		t.Fatal("a checkpoint covering part of the replay forgot the decisions still to replay")
	}
	passedOn(t, d, 3, []pipeline.Record{rec(pipeline.OpInsert, 21, "e10", 310*time.Second, 8)})
	d.Checkpointed(5)
	passedOn(t, d, 3, []pipeline.Record{rec(pipeline.OpInsert, 22, "e11", 320*time.Second, 9)})
	if d.carried != nil {
		t.Fatalf("%d decisions of earlier generations still carried after a checkpoint covered the first change after the replay", len(d.carried))
	}
}

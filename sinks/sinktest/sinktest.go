package sinktest

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// Harness adapts one sink implementation to the suite. A harness whose
// sink keeps no versions (a plain Kafka topic) also has a method
// KeepsVersions() bool that returns false.
type Harness interface {
	// Open returns an unopened sink on a fresh, empty target. The suite
	// opens and closes it.
	Open(t *testing.T) pipeline.Sink
	// Reopen returns an unopened sink on the same target as the last Open,
	// after the previous sink was closed: a restart.
	Reopen(t *testing.T) pipeline.Sink
	// Read returns the target's live (not deleted) rows of table keyed by
	// RowKey, values aligned with table.Columns in the record model's value
	// types. It is called while the sink last returned is open.
	Read(t *testing.T, table *pipeline.Table) map[string][]any
}

// Run runs the conformance suite: every sink must pass it.
func Run(t *testing.T, h Harness) {
	t.Run("LogInOrderThenShuffledReplays", func(t *testing.T) { testReplays(t, h) })
	t.Run("ShuffledOnFreshTarget", func(t *testing.T) { testShuffled(t, h) })
	t.Run("RestartMidway", func(t *testing.T) { testRestart(t, h) })
	t.Run("StaleVersionChangesNothing", func(t *testing.T) { testStale(t, h) })
	t.Run("UnchangedKeepsStoredValue", func(t *testing.T) { testUnchanged(t, h) })
	t.Run("ReadsBesideChangesInOneWrite", func(t *testing.T) { testReadsBesideChanges(t, h) })
	if k, ok := h.(interface{ KeepsVersions() bool }); !ok || k.KeepsVersions() {
		t.Run("NewGenerationAboveEverything", func(t *testing.T) { testNewGeneration(t, h) })
	}
	if k, ok := h.(interface{ Sweeps() bool }); !ok || k.Sweeps() {
		t.Run("SweepKeepsWhatSortsAbove", func(t *testing.T) { testSweep(t, h) })
	}
}

// testSweep writes a re-read's sweep (Invariant 14: a truncate marked
// Replaces, after the rows the re-read emitted above it): only the rows
// below it go, those the re-read did not find, also across a restart.
// A harness whose sink does not write sweeps (Kafka: a consumer would
// clear the re-read rows too) has a method Sweeps() bool that returns
// false.
func testSweep(t *testing.T, h Harness) {
	s := open(t, h.Open(t))
	m := NewModel()
	sweep := rec(pipeline.OpTruncate, 15, nil)
	sweep.Snapshot, sweep.Replaces = true, true
	reread := func(id int64, name string) pipeline.Record {
		r := rec(pipeline.OpRead, 20, account(id, name, id, nil))
		r.Snapshot, r.Replaces = true, true
		return r
	}
	steps := [][]pipeline.Record{
		{rec(pipeline.OpInsert, 10, account(1, "one", 1, nil)), rec(pipeline.OpInsert, 10, account(2, "two", 2, nil)),
			rec(pipeline.OpInsert, 10, account(3, "three", 3, nil)), rec(pipeline.OpInsert, 10, account(4, "four", 4, nil)),
			rec(pipeline.OpInsert, 10, account(5, "deleted unseen", 5, nil)), rec(pipeline.OpInsert, 10, account(6, "six", 6, nil))},
		{reread(1, "one read again"), reread(2, "two read again"), reread(3, "three read again"),
			rec(pipeline.OpUpdate, 21, account(4, "four changed while read", 4, nil)),
			rec(pipeline.OpDelete, 22, []any{int64(6), nil, nil, nil, nil, nil, nil})},
		{sweep},
	}
	for i, b := range steps {
		write(t, s, b)
		m.Apply(b)
		check(t, h, m, fmt.Sprintf("after step %d", i))
	}
	if live := m.Live(Accounts); len(live) != 4 {
		t.Fatalf("model self-check failed: %v", live)
	}
	closeSink(t, s)
	s = open(t, h.Reopen(t))
	defer closeSink(t, s)
	check(t, h, m, "after a restart")
}

func open(t *testing.T, s pipeline.Sink) pipeline.Sink {
	t.Helper()
	if err := s.Open(context.Background()); err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func closeSink(t *testing.T, s pipeline.Sink) {
	t.Helper()
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// write writes one batch and fails the test on any error.
func write(t *testing.T, s pipeline.Sink, records []pipeline.Record) {
	t.Helper()
	if err := s.Write(context.Background(), records); err != nil {
		var be *pipeline.BatchError
		if errors.As(err, &be) {
			t.Fatalf("write: %d records rejected: %v", len(be.Failed), err)
		}
		t.Fatalf("write: %v", err)
	}
}

// check asserts the target holds exactly the model's live rows.
func check(t *testing.T, h Harness, m *Model, when string) {
	t.Helper()
	for _, table := range []*pipeline.Table{Accounts, Items} {
		if diff := Diff(table, m.Live(table), h.Read(t, table)); diff != "" {
			t.Fatalf("%s: table %s differs from expected:\n%s", when, table.ID, diff)
		}
	}
}

// Diff describes how got differs from want, "" when they hold the same rows
// with equal values: verify.Compare, as text.
func Diff(table *pipeline.Table, want, got map[string][]any) string {
	diffs := verify.Compare(table, want, got)
	keys := make([]string, 0, len(diffs))
	for k := range diffs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		d := diffs[k]
		switch d.Kind {
		case "missing":
			out = append(out, fmt.Sprintf("  missing row %s", k))
		case "unexpected":
			out = append(out, fmt.Sprintf("  unexpected row %s", k))
		default:
			for _, c := range d.Columns {
				out = append(out, fmt.Sprintf("  row %s column %s: got %s, want %s", k, c.Column, c.Sink, c.Source))
			}
		}
	}
	if len(out) > 12 {
		out = append(out[:12], fmt.Sprintf("  … %d more", len(out)-12))
	}
	return strings.Join(out, "\n")
}

// testReplays applies the log in order, then replays it three times in
// shuffled batch order with duplicates injected: nothing may change.
func testReplays(t *testing.T, h Harness) {
	log := GenerateLog(1)
	s := open(t, h.Open(t))
	defer closeSink(t, s)
	m := NewModel()
	for _, b := range log.Batches {
		write(t, s, b)
		m.Apply(b)
	}
	// The model applied in order reproduces the source database: a check
	// of the generated log itself.
	for table, rows := range log.Final {
		if diff := Diff(table, rows, m.Live(table)); diff != "" {
			t.Fatalf("generated log is inconsistent for %s:\n%s", table.ID, diff)
		}
	}
	check(t, h, m, "after the log in order")
	checkKeyReads(t, s, m, "after the log in order")
	rng := rand.New(rand.NewPCG(7, 7))
	for round := 1; round <= 3; round++ {
		for _, b := range shuffledWithDuplicates(rng, log.Batches) {
			write(t, s, b)
		}
		check(t, h, m, fmt.Sprintf("after shuffled replay %d", round))
	}
	checkKeyReads(t, s, m, "after the shuffled replays")
}

// shuffledWithDuplicates permutes the batches and appends to some of them
// copies of records from other batches and from themselves. Like a real
// replay it keeps each key's changes within one batch in version order: a
// copy is appended only when the batch holds no newer change of its key.
func shuffledWithDuplicates(rng *rand.Rand, batches [][]pipeline.Record) [][]pipeline.Record {
	out := make([][]pipeline.Record, len(batches))
	for i, j := range rng.Perm(len(batches)) {
		b := slices.Clone(batches[j])
		if rng.IntN(3) == 0 {
			other := batches[rng.IntN(len(batches))]
			for _, r := range []pipeline.Record{other[rng.IntN(len(other))], b[rng.IntN(len(b))]} {
				if !hasNewer(b, &r) {
					b = append(b, r)
				}
			}
		}
		out[i] = b
	}
	return out
}

// hasNewer reports whether b holds a change of r's table (truncates
// included) or key that is newer than r.
func hasNewer(b []pipeline.Record, r *pipeline.Record) bool {
	for i := range b {
		x := &b[i]
		if x.Table != r.Table || !r.Version.Less(x.Version) {
			continue
		}
		if x.Op == pipeline.OpTruncate || r.Op == pipeline.OpTruncate || Key(x.Key()) == Key(r.Key()) {
			return true
		}
	}
	return false
}

// testShuffled applies the log in a shuffled batch order to a fresh target;
// the model sees the same order.
func testShuffled(t *testing.T, h Harness) {
	log := GenerateLog(2)
	s := open(t, h.Open(t))
	defer closeSink(t, s)
	m := NewModel()
	rng := rand.New(rand.NewPCG(11, 3))
	for _, b := range shuffledWithDuplicates(rng, log.Batches) {
		write(t, s, b)
		m.Apply(b)
	}
	check(t, h, m, "after the log in shuffled order")
}

// testRestart stops the sink midway and resumes on the reopened target,
// replaying a few batches again (at-least-once delivery).
func testRestart(t *testing.T, h Harness) {
	log := GenerateLog(3)
	s := open(t, h.Open(t))
	m := NewModel()
	half := len(log.Batches) / 2
	for _, b := range log.Batches[:half] {
		write(t, s, b)
		m.Apply(b)
	}
	closeSink(t, s)
	s = open(t, h.Reopen(t))
	defer closeSink(t, s)
	check(t, h, m, "after restart")
	for _, b := range log.Batches[half-3:] {
		write(t, s, b)
		m.Apply(b)
	}
	check(t, h, m, "after resuming")
	for table, rows := range log.Final {
		if diff := Diff(table, rows, h.Read(t, table)); diff != "" {
			t.Fatalf("target differs from the source database for %s:\n%s", table.ID, diff)
		}
	}
}

func account(id int64, name string, cents int64, note any) []any {
	return []any{id, name, pipeline.Decimal{Unscaled: big.NewInt(cents), Scale: 2},
		pipeline.Timestamp{Micros: 1.7e15 + id}, true, note, []any{"a", nil, "b"}}
}

func rec(op pipeline.Op, minor uint64, row []any) pipeline.Record {
	r := pipeline.Record{Op: op, Table: Accounts, Version: pipeline.Version{0, 5000, 0, minor}}
	if op == pipeline.OpDelete {
		r.Before = row
	} else {
		r.After = row
	}
	return r
}

// testStale writes changes older than what the target holds: nothing moves.
func testStale(t *testing.T, h Harness) {
	s := open(t, h.Open(t))
	defer closeSink(t, s)
	m := NewModel()
	steps := [][]pipeline.Record{
		{rec(pipeline.OpInsert, 10, account(1, "new", 100, "n")), rec(pipeline.OpInsert, 10, account(2, "two", 200, nil))},
		{rec(pipeline.OpUpdate, 5, account(1, "stale", 1, "s"))},                    // older update
		{rec(pipeline.OpRead, 1, account(1, "snapshot", 2, nil))},                   // older snapshot row
		{rec(pipeline.OpUpdate, 10, account(1, "same version", 3, nil))},            // equal version
		{rec(pipeline.OpDelete, 9, []any{int64(2), nil, nil, nil, nil, nil, nil})},  // older delete
		{rec(pipeline.OpDelete, 11, []any{int64(1), nil, nil, nil, nil, nil, nil})}, // newer delete
		{rec(pipeline.OpInsert, 10, account(1, "resurrected", 4, nil))},             // replayed insert
		{rec(pipeline.OpRead, 0, account(1, "late snapshot", 5, nil))},              // late snapshot row
		{rec(pipeline.OpUpdate, 8, account(2, "old", 6, nil)), rec(pipeline.OpUpdate, 12, account(2, "newest", 7, "z")),
			rec(pipeline.OpUpdate, 11, account(2, "older in batch", 8, nil))}, // only the newest counts
	}
	for i, b := range steps {
		write(t, s, b)
		m.Apply(b)
		check(t, h, m, fmt.Sprintf("after step %d", i))
	}
	live := m.Live(Accounts)
	if len(live) != 1 || !Equal(live[Key([]any{int64(2)})][1], "newest") {
		t.Fatalf("model self-check failed: %v", live)
	}
}

// testReadsBesideChanges writes, on a fresh target, Writes that are mostly
// snapshot reads of new keys with a few updates and deletes among them,
// of keys read in the same Write or an earlier one, versioned above or
// below those reads (what an incremental snapshot's batches hold while
// the stream runs; a sink's bulk path may take the reads apart from the
// changes, upsert.SplitBulk). Some Writes read a key the target holds
// already. The target must equal the records applied in order, then stay
// so under shuffled replays.
func testReadsBesideChanges(t *testing.T, h Harness) {
	s := open(t, h.Open(t))
	defer closeSink(t, s)
	m := NewModel()
	rng := rand.New(rand.NewPCG(11, 3))
	var writes [][]pipeline.Record
	next := int64(1)
	for w := range 8 {
		var b []pipeline.Record
		for range 24 {
			minor := uint64(100 + rng.IntN(800))
			b = append(b, rec(pipeline.OpRead, minor, account(next, fmt.Sprintf("read %d", w), next, nil)))
			next++
		}
		if w%3 == 2 { // a key the target holds: the bulk path must refuse the Write
			id := 1 + rng.Int64N(next-25)
			b = append(b, rec(pipeline.OpRead, uint64(rng.IntN(1000)), account(id, "read again", id, nil)))
		}
		for range 6 {
			id := 1 + rng.Int64N(next-1) // this Write's keys or earlier ones
			minor := uint64(rng.IntN(1000))
			r := rec(pipeline.OpUpdate, minor, account(id, fmt.Sprintf("update %d", w), int64(minor), "u"))
			if rng.IntN(3) == 0 {
				r = rec(pipeline.OpDelete, minor, []any{id, nil, nil, nil, nil, nil, nil})
			}
			b = slices.Insert(b, rng.IntN(len(b)+1), r)
		}
		write(t, s, b)
		m.Apply(b)
		writes = append(writes, b)
		check(t, h, m, fmt.Sprintf("after write %d", w))
	}
	if live := len(m.Live(Accounts)); live < 150 || live >= int(next-1) {
		t.Fatalf("model self-check: %d live rows of %d read: the changes should delete some and keep most", live, next-1)
	}
	for _, b := range shuffledWithDuplicates(rng, writes) {
		write(t, s, b)
	}
	check(t, h, m, "after shuffled replays")
}

// testUnchanged checks that an Unchanged value keeps what the target holds,
// across batches and within one batch.
func testUnchanged(t *testing.T, h Harness) {
	s := open(t, h.Open(t))
	defer closeSink(t, s)
	m := NewModel()
	unchangedNote := func(row []any) []any { row[noteCol] = pipeline.UnchangedValue; return row }
	steps := [][]pipeline.Record{
		{rec(pipeline.OpInsert, 1, account(1, "one", 100, "kept across batches"))},
		{rec(pipeline.OpUpdate, 2, unchangedNote(account(1, "one'", 101, nil)))},
		{rec(pipeline.OpInsert, 3, account(2, "two", 200, "kept within a batch")),
			rec(pipeline.OpUpdate, 4, unchangedNote(account(2, "two'", 201, nil))),
			rec(pipeline.OpUpdate, 5, unchangedNote(account(2, "two''", 202, nil)))},
		{rec(pipeline.OpUpdate, 6, unchangedNote(account(1, "one''", 102, nil))),
			rec(pipeline.OpUpdate, 2, unchangedNote(account(1, "one'", 101, nil)))}, // replay, out of order
	}
	for i, b := range steps {
		write(t, s, b)
		m.Apply(b)
		check(t, h, m, fmt.Sprintf("after step %d", i))
	}
	live := m.Live(Accounts)
	if !Equal(live[Key([]any{int64(1)})][noteCol], "kept across batches") ||
		!Equal(live[Key([]any{int64(2)})][noteCol], "kept within a batch") {
		t.Fatalf("model self-check failed: %v", live)
	}
}

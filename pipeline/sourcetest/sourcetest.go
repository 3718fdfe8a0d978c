package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Config adapts one source implementation to the suite.
type Config struct {
	// New returns an unopened source. Every source it returns must read
	// the same feed (the same upstream database or generator).
	New func(t *testing.T) pipeline.Source
	// Drive, when set, makes the upstream changes that form the feed. It
	// runs once, before anything is read.
	Drive func(t *testing.T)
	// Records is how many records the suite reads from the feed; it stops
	// earlier at io.EOF. It must be reachable without Drive running again.
	Records int
	// ExactResume asserts that reopening from a position yields exactly
	// the records after it. Without it, records at or before the position
	// may be delivered again (at-least-once), but none after it may be
	// missing.
	ExactResume bool
	// Blocking, when set, returns an unopened source whose Read blocks
	// (nothing to read, or paced), to check that cancelling the context
	// interrupts a blocked Read.
	Blocking func(t *testing.T) pipeline.Source
	// Wait bounds each Read that should produce records (10s when zero).
	Wait time.Duration
}

// Run runs the conformance suite.
func Run(t *testing.T, c Config) {
	if c.Wait <= 0 {
		c.Wait = 10 * time.Second
	}
	if c.Drive != nil {
		c.Drive(t)
	}
	full := read(t, c, nil, c.Records)
	if len(records(full)) == 0 {
		t.Fatal("the feed produced no records")
	}
	t.Run("VersionsIncreasePerKey", func(t *testing.T) { increasing(t, records(full)) })
	t.Run("PositionsAreResumePoints", func(t *testing.T) { testResume(t, c, full) })
	t.Run("AckedRestartLeavesNoGap", func(t *testing.T) { testAckedRestart(t, c, full) })
	t.Run("ReadHonoursCancellation", func(t *testing.T) { testCancel(t, c) })
}

// read opens a source from `from` and reads until it has limit records or
// the feed ends.
func read(t *testing.T, c Config, from pipeline.Position, limit int) []pipeline.Batch {
	t.Helper()
	src := c.New(t)
	ctx := context.Background()
	if err := src.Open(ctx, from); err != nil {
		t.Fatalf("open from %s: %v", from, err)
	}
	defer src.Close(ctx)
	var out []pipeline.Batch
	for n := 0; n < limit; {
		b, err := readOne(c, src)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if len(b.Records) == 0 && b.Pos == nil {
			t.Fatal("read returned a batch with neither records nor a position")
		}
		out = append(out, b)
		n += len(b.Records)
	}
	return out
}

func readOne(c Config, src pipeline.Source) (pipeline.Batch, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.Wait)
	defer cancel()
	return src.Read(ctx)
}

func records(batches []pipeline.Batch) []pipeline.Record {
	var out []pipeline.Record
	for _, b := range batches {
		out = append(out, b.Records...)
	}
	return out
}

// identity names a change: table, op, key and version.
func identity(r *pipeline.Record) string {
	table := ""
	if r.Table != nil {
		table = r.Table.ID.String()
	}
	return fmt.Sprintf("%s %s %v %s", table, r.Op, r.Key(), r.Version)
}

// content is identity plus the images.
func content(r *pipeline.Record) string {
	return fmt.Sprintf("%s before=%v after=%v", identity(r), r.Before, r.After)
}

func increasing(t *testing.T, recs []pipeline.Record) {
	t.Helper()
	last := map[string]pipeline.Version{}
	for i := range recs {
		r := &recs[i]
		if !r.Op.IsData() || r.Op == pipeline.OpTruncate {
			continue
		}
		k := fmt.Sprintf("%s %v", r.Table.ID, r.Key())
		if v, ok := last[k]; ok && !v.Less(r.Version) {
			t.Fatalf("record %d (%s): version does not increase for its key (previous %s)", i, identity(r), v)
		}
		last[k] = r.Version
	}
}

// after returns the records of the batches after the one at index i.
func after(batches []pipeline.Batch, i int) []pipeline.Record { return records(batches[i+1:]) }

// testResume reopens the source from several positions of the full read
// and checks what follows.
func testResume(t *testing.T, c Config, full []pipeline.Batch) {
	var resumable []int
	for i, b := range full {
		if b.Pos != nil {
			resumable = append(resumable, i)
		}
	}
	if len(resumable) == 0 {
		t.Fatal("no batch carried a position")
	}
	picks := map[int]bool{resumable[0]: true, resumable[len(resumable)/2]: true, resumable[len(resumable)-1]: true}
	if len(resumable) > 3 {
		picks[resumable[len(resumable)/3]] = true
	}
	for i := range picks {
		want := after(full, i)
		got := records(read(t, c, full[i].Pos, len(want)))
		compare(t, c, fmt.Sprintf("from the position of batch %d (%s)", i, full[i].Pos), records(full[:i+1]), want, got)
	}
}

// compare checks resumed records against the ones expected after a
// position; before is what was delivered up to it.
func compare(t *testing.T, c Config, where string, before, want, got []pipeline.Record) {
	t.Helper()
	if c.ExactResume {
		if len(got) < len(want) {
			t.Fatalf("%s: %d records, want %d", where, len(got), len(want))
		}
		for j := range want {
			if content(&got[j]) != content(&want[j]) {
				t.Fatalf("%s: record %d is %s, want %s", where, j, content(&got[j]), content(&want[j]))
			}
		}
		return
	}
	seen := map[string]bool{}
	for i := range got {
		seen[identity(&got[i])] = true
	}
	for i := range want {
		if !seen[identity(&want[i])] {
			t.Fatalf("%s: gap: %s is missing", where, identity(&want[i]))
		}
	}
	earlier := map[string]bool{}
	for i := range before {
		earlier[identity(&before[i])] = true
	}
	wanted := map[string]bool{}
	for i := range want {
		wanted[identity(&want[i])] = true
	}
	for i := range got {
		if id := identity(&got[i]); !wanted[id] && !earlier[id] {
			t.Fatalf("%s: unexpected record %s", where, id)
		}
	}
	increasing(t, got)
}

// testAckedRestart reads part of the feed, acknowledges the last position,
// closes, reopens from it and reads on: together the sessions cover the
// feed.
func testAckedRestart(t *testing.T, c Config, full []pipeline.Batch) {
	ctx := context.Background()
	total := len(records(full))
	src := c.New(t)
	if err := src.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var first []pipeline.Record
	var acked pipeline.Position
	ackedAt := 0
	for len(first) < total/2 {
		b, err := readOne(c, src)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		first = append(first, b.Records...)
		if b.Pos != nil {
			acked, ackedAt = b.Pos, len(first)
			if err := src.Ack(ctx, b.Pos); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
	}
	if err := src.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if acked == nil {
		t.Fatal("no position to acknowledge in the first half of the feed")
	}
	// Records read after the acknowledged position are not durable: the
	// restart must deliver them again. Sources may group transactions into
	// batches differently from one read to the next, so the position is
	// located by the last record before it, not by batch.
	all := records(full)
	k := 0
	if ackedAt > 0 {
		last := identity(&first[ackedAt-1])
		k = -1
		for j := range all {
			if identity(&all[j]) == last {
				k = j + 1
				break
			}
		}
		if k < 0 {
			t.Fatalf("record %s before the acknowledged position is not in the full read", last)
		}
	}
	want := all[k:]
	got := records(read(t, c, acked, len(want)))
	compare(t, c, "after an acknowledged restart", all[:k], want, got)
	union := map[string]bool{}
	for _, recs := range [][]pipeline.Record{first[:ackedAt], got} {
		for j := range recs {
			union[identity(&recs[j])] = true
		}
	}
	for j := range all {
		if !union[identity(&all[j])] {
			t.Fatalf("the sessions together miss %s", identity(&all[j]))
		}
	}
}

func testCancel(t *testing.T, c Config) {
	src := c.New(t)
	if err := src.Open(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := src.Read(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("read with a cancelled context: got %v, want context.Canceled", err)
	}
	if c.Blocking == nil {
		return
	}
	blocked := c.Blocking(t)
	if err := blocked.Open(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	defer blocked.Close(context.Background())
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	for {
		_, err := blocked.Read(ctx)
		if err == nil {
			if time.Since(start) > 5*time.Second {
				t.Fatal("the blocking source never blocked")
			}
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("blocked read: got %v, want context.DeadlineExceeded", err)
		}
		break
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("blocked read returned %v after its context ended", d)
	}
}

package window

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

var ordersTable = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "orders"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "region", Type: pipeline.TypeString},
		{Name: "amount", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2, Nullable: true},
		{Name: "created_at", Type: pipeline.TypeTimestampTZ},
	},
	KeyIdx: []int{0},
}

// seen is an Observer that keeps what it was told.
type seen struct {
	late           map[string]int
	windows, bytes int64
	lag            time.Duration
}

func (s *seen) Late(window, policy string, n int) { s.late[window+" "+policy] += n }
func (s *seen) Progress(_ string, lag time.Duration, windows, _, _ int, stateBytes int64, _ time.Duration) {
	s.lag, s.windows, s.bytes = lag, int64(windows), stateBytes
}

func revenue(dir string) Options {
	return Options{
		Name: "transforms[0].window", Output: pipeline.TableID{Schema: "analytics", Table: "revenue"},
		Input: ordersTable.ID, EventTime: "created_at", Spec: Tumbling(time.Minute),
		OutOfOrder: 5 * time.Second, Lateness: 30 * time.Second, IdleTimeout: 10 * time.Second,
		GroupBy: []string{"region"}, Late: LateSideOutput, Dir: dir,
		Aggregates: []AggDef{{As: "orders", Func: CountRows}, {As: "revenue", Func: Sum, Column: "amount"}, {As: "biggest", Func: Max, Column: "amount"}},
	}
}

func openOp(t *testing.T, o Options, resumed bool) *Operator {
	t.Helper()
	op, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Begin(context.Background(), resumed); err != nil {
		op.Close()
		t.Fatal(err)
	}
	return op
}

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func ord(op pipeline.Op, id int64, region, amount string, at time.Duration, ver uint64) pipeline.Record {
	row := []any{id, region, d(amount), pipeline.TimestampOf(t0.Add(at))}
	r := pipeline.Record{Op: op, Table: ordersTable, Version: v(ver), EventTime: t0.Add(at)}
	if op == pipeline.OpDelete {
		r.Before = row
	} else {
		r.After = row
	}
	return r
}

// results renders the window's records of a batch.
func results(t *testing.T, recs []pipeline.Record) []string {
	t.Helper()
	var out []string
	for _, r := range recs {
		if r.Table == nil || r.Table.ID.Table != "revenue" {
			continue
		}
		if r.Op == pipeline.OpTruncate {
			out = append(out, fmt.Sprintf("truncate below generation %d", r.Version[0]))
			continue
		}
		img := r.After
		if img == nil {
			img = r.Before
		}
		start := img[0].(pipeline.Timestamp).Time().Sub(t0)
		out = append(out, fmt.Sprintf("%s %v %s %v v%d", r.Op, start, img[2], img[3:], r.Version[1]))
	}
	return out
}

// process runs one batch, whose outputs are then durable and covered by
// a checkpoint at once.
func process(t *testing.T, op *Operator, recs ...pipeline.Record) ([]pipeline.Record, *pipeline.Rejects) {
	t.Helper()
	out, err := op.Process(context.Background(), recs)
	var rj *pipeline.Rejects
	if err != nil && !errors.As(err, &rj) {
		t.Fatal(err)
	}
	if err := op.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	op.Settled(op.batches)
	return out, rj
}

func TestOperatorEmitsCorrectsAndSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	obs := &seen{late: map[string]int{}}
	o := revenue(dir)
	o.Observer = obs
	op := openOp(t, o, false)
	// An initial load's truncate barrier and a shape carry no row.
	process(t, op, pipeline.Record{Op: pipeline.OpTruncate, Table: ordersTable, Snapshot: true, Version: pipeline.Version{0, 0, 0, 0}},
		pipeline.Record{Op: pipeline.OpShape, Table: ordersTable})
	out, _ := process(t, op,
		ord(pipeline.OpInsert, 1, "EU", "10.00", 10*time.Second, 1),
		ord(pipeline.OpInsert, 2, "EU", "5.50", 20*time.Second, 2),
		ord(pipeline.OpInsert, 3, "US", "1.00", 61*time.Second, 3))
	if len(out) != 3 || len(results(t, out)) != 0 {
		t.Fatalf("before the watermark passes 1m: %v", results(t, out))
	}
	if out[0].Table != ordersTable {
		t.Fatal("the input records do not pass through")
	}
	// 66 s - 5 s out of orderness: the first minute closes.
	out, _ = process(t, op, ord(pipeline.OpInsert, 4, "US", "2.00", 66*time.Second, 4))
	if got := strings.Join(results(t, out), "; "); got != "c 0s EU [2 15.50 10.00] v2" {
		t.Fatalf("on close: %s", got)
	}
	if obs.windows != 2 || obs.bytes == 0 || obs.lag < 24*time.Hour {
		t.Fatalf("progress: %d windows, %d bytes, lag %s (the events are months old)", obs.windows, obs.bytes, obs.lag)
	}
	sh := out[1].Table
	if sh.ID.String() != "analytics.revenue" || len(sh.KeyIdx) != 3 || sh.Columns[4].Type != pipeline.TypeDecimal || sh.Columns[4].Scale != 2 {
		t.Fatalf("results' shape: %+v", sh)
	}
	// Kill: the state is on disk; a new operator resumes from it.
	op.Close()
	op = openOp(t, o, true)
	// The first batch after the restart writes the closed windows'
	// results again, under the same versions (the last ones may not have
	// reached the sinks); a heartbeat first thing after the restart does
	// not count as idle time, so nothing more closes.
	out, _ = process(t, op, pipeline.Record{Op: pipeline.OpHeartbeat, EventTime: t0.Add(130 * time.Second)})
	if got := strings.Join(results(t, out), "; "); got != "u 0s EU [2 15.50 10.00] v2" {
		t.Fatalf("after the restart: %s", got)
	}
	// Order 1 grows late (within the lateness): a correction (a retraction
	// and an addition: two changes of the group).
	out, _ = process(t, op, ord(pipeline.OpUpdate, 1, "EU", "20.00", 10*time.Second, 5))
	if got := strings.Join(results(t, out), "; "); got != "u 0s EU [2 25.50 20.00] v4" {
		t.Fatalf("correction: %s", got)
	}
	// Results leave after the batch's records, never with a lower Origin.
	if last := out[len(out)-1]; last.Origin != v(5) || !last.Derived() {
		t.Fatalf("the correction's origin %v", last.Origin)
	}
	// The watermark passes 1m30s: the first window's state is gone, and a
	// change for it goes to the dead-letter queue, still reaching its
	// sinks.
	process(t, op, ord(pipeline.OpInsert, 5, "US", "3.00", 100*time.Second, 6))
	late := ord(pipeline.OpInsert, 6, "EU", "7.00", 30*time.Second, 7)
	out, rj := process(t, op, late)
	if rj == nil || len(rj.Records) != 1 || !strings.Contains(rj.Records[0].Err.Error(), "late: the change belongs to window [2026-01-01T12:00:00Z, 2026-01-01T12:01:00Z)") {
		t.Fatalf("late: %v", rj)
	}
	if len(out) != 1 || out[0].Version != late.Version {
		t.Fatalf("the late record does not reach its sinks: %+v", out)
	}
	if obs.late["transforms[0].window side_output"] != 1 {
		t.Fatalf("late changes counted: %v", obs.late)
	}
	// A restart replays changes from an older checkpoint: those whose
	// windows have expired since are replays, not late changes.
	op.Close()
	op = openOp(t, o, true)
	if out, rj = process(t, op, ord(pipeline.OpInsert, 2, "EU", "5.50", 20*time.Second, 2)); rj != nil || len(results(t, out)) != 0 {
		t.Fatalf("a replay of a change whose window expired: %v %v", rj, results(t, out))
	}
	// Heartbeats after 10 s of source time without orders move the
	// watermark (after a restart idleness counts from the first one):
	// the second minute closes.
	process(t, op, pipeline.Record{Op: pipeline.OpHeartbeat, EventTime: t0.Add(200 * time.Second)})
	out, _ = process(t, op, pipeline.Record{Op: pipeline.OpHeartbeat, EventTime: t0.Add(211 * time.Second)})
	if got := strings.Join(results(t, out), "; "); got != "c 1m0s US [3 6.00 3.00] v3" {
		t.Fatalf("idle: %s", got)
	}
	op.Close()
}

// Results whose Origin runs ahead of every stream change applied stem
// from snapshot reads (a later parallel MariaDB reader's rows sort above
// the stream changes written after them): they are snapshot records,
// which the exactly-once Kafka sink neither counts in its mark nor
// skips. Once the stream has passed the reads, results are stream
// records again.
func TestOperatorResultsOfReadsAheadOfTheStreamAreSnapshotRecords(t *testing.T) {
	op := openOp(t, revenue(t.TempDir()), false)
	defer op.Close()
	read := func(id int64, at time.Duration) pipeline.Record {
		r := ord(pipeline.OpRead, id, "EU", "1.00", at, 0)
		r.Version, r.Snapshot = pipeline.Version{0, 200, 0, 1}, true
		return r
	}
	process(t, op, read(1, 10*time.Second), read(2, 20*time.Second))
	// A change committed before the reader's position closes the first
	// minute.
	out, _ := process(t, op, ord(pipeline.OpInsert, 3, "US", "2.00", 66*time.Second, 150))
	res := out[1:]
	if len(res) != 1 || !res[0].Snapshot || res[0].Origin != (pipeline.Version{0, 200, 0, 1}) {
		t.Fatalf("the results of the reads: %v, snapshot %v", results(t, res), len(res) == 1 && res[0].Snapshot)
	}
	out, _ = process(t, op, ord(pipeline.OpInsert, 4, "US", "3.00", 130*time.Second, 250))
	res = out[1:]
	if len(res) != 1 || res[0].Snapshot || res[0].Origin != v(250) {
		t.Fatalf("the results of stream changes past the reads: %v, snapshot %v", results(t, res), len(res) == 1 && res[0].Snapshot)
	}
	// A heartbeat newer than the last change closes the next minute: a
	// stream record, so the result is one too.
	out, _ = process(t, op, pipeline.Record{Op: pipeline.OpHeartbeat, EventTime: t0.Add(200 * time.Second), Version: pipeline.Version{0, 260}})
	res = out[1:]
	if len(res) != 1 || res[0].Snapshot || res[0].Origin != (pipeline.Version{0, 260}) {
		t.Fatalf("a result a heartbeat closed: %v, snapshot %v", results(t, res), len(res) == 1 && res[0].Snapshot)
	}
}

func TestOperatorRefusesStateItCannotUse(t *testing.T) {
	dir := t.TempDir()
	op, err := Open(revenue(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Begin(context.Background(), true); err == nil || !strings.Contains(err.Error(), "--reset-offsets") {
		t.Fatalf("resuming without state: %v", err)
	}
	if err := op.Begin(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	op.Close()
	o := revenue(dir)
	o.GroupBy = nil
	op, _ = Open(o)
	defer op.Close()
	if err := op.Begin(context.Background(), true); err == nil || !strings.Contains(err.Error(), "definition changed") {
		t.Fatalf("resuming with another definition: %v", err)
	}
}

func TestOperatorSessionsMergeAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	o := revenue(dir)
	o.Spec, o.OutOfOrder, o.Lateness = Session(30*time.Second), 0, 2*time.Minute
	op := openOp(t, o, false)
	bounds := func(recs []pipeline.Record) string {
		var out []string
		for _, r := range recs {
			if r.Table != nil && r.Table.ID.Table == "revenue" {
				img := r.After
				if img == nil {
					img = r.Before
				}
				out = append(out, fmt.Sprintf("%s [%v,%v) %v %v v%d", r.Op, img[0].(pipeline.Timestamp).Time().Sub(t0),
					img[1].(pipeline.Timestamp).Time().Sub(t0), img[2], img[3:], r.Version[1]))
			}
		}
		return strings.Join(out, "; ")
	}
	process(t, op, ord(pipeline.OpInsert, 1, "EU", "10.00", 0, 1), ord(pipeline.OpInsert, 2, "EU", "5.50", 10*time.Second, 2))
	out, _ := process(t, op, ord(pipeline.OpInsert, 3, "US", "1.00", 100*time.Second, 3))
	if got := bounds(out); got != "c [0s,40s) EU [2 15.50 10.00] v2" {
		t.Fatalf("on close: %s", got)
	}
	op.Close()
	op = openOp(t, o, true)
	defer op.Close()
	// A late order at 35 s, within the lateness, extends the written
	// session to 65 s: the old row is deleted (instead of being written
	// again, as it would be after the restart), the new one written.
	out, _ = process(t, op, ord(pipeline.OpInsert, 4, "EU", "1.00", 35*time.Second, 4))
	if got := bounds(out); got != "c [0s,1m5s) EU [3 16.50 10.00] v3; d [0s,40s) EU [<nil> <nil> <nil>] v3" {
		t.Fatalf("merge after the restart: %s", got)
	}
}

func TestOperatorEarlyResults(t *testing.T) {
	o := revenue(t.TempDir())
	o.Early = time.Nanosecond // every batch
	op := openOp(t, o, false)
	defer op.Close()
	rows := func(recs []pipeline.Record) string {
		var out []string
		for _, r := range recs {
			if r.Table != nil && r.Table.ID.Table == "revenue" {
				out = append(out, fmt.Sprintf("%s %v %v partial=%v v%d.%d", r.Op, r.After[2], r.After[3:6], r.After[6], r.Version[1], r.Version[2]))
			}
		}
		return strings.Join(out, "; ")
	}
	out, _ := process(t, op, ord(pipeline.OpInsert, 1, "EU", "10.00", 10*time.Second, 1))
	if got := rows(out); got != "c EU [1 10.00 10.00] partial=true v1.0" {
		t.Fatalf("early: %s", got)
	}
	if c := out[1].Table.Columns; len(c) != 7 || c[6].Name != PartialColumn || c[6].Type != pipeline.TypeBool {
		t.Fatalf("results' columns: %+v", c)
	}
	out, _ = process(t, op, ord(pipeline.OpInsert, 2, "EU", "5.00", 20*time.Second, 2))
	if got := rows(out); got != "u EU [2 15.00 10.00] partial=true v2.0" {
		t.Fatalf("early again: %s", got)
	}
	// The watermark passes 1m: the final row, above the partial one.
	out, _ = process(t, op, ord(pipeline.OpInsert, 3, "US", "1.00", 66*time.Second, 3))
	if got := rows(out); got != "u EU [2 15.00 10.00] partial=false v2.1; c US [1 1.00 1.00] partial=true v1.0" {
		t.Fatalf("close: %s", got)
	}
}

// A partial row whose group then lost every row is deleted again after a
// restart: the delete may not have reached the sinks, and the window's
// close writes nothing for a group without rows.
func TestOperatorDeletesAPartialRowAgainAfterARestart(t *testing.T) {
	dir := t.TempDir()
	o := revenue(dir)
	o.Early = time.Nanosecond // every batch
	op := openOp(t, o, false)
	out, _ := process(t, op, ord(pipeline.OpInsert, 1, "EU", "10.00", 10*time.Second, 1))
	if got := strings.Join(results(t, out), "; "); got != "c 0s EU [1 10.00 10.00 true] v1" {
		t.Fatalf("early: %s", got)
	}
	// The order goes: its partial row is deleted, and the daemon is killed
	// before that delete is durable.
	out, err := op.Process(context.Background(), []pipeline.Record{ord(pipeline.OpDelete, 1, "EU", "10.00", 10*time.Second, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(results(t, out), "; "); got != "d 0s EU [<nil> <nil> <nil> false] v2" {
		t.Fatalf("the group emptied: %s", got)
	}
	op.Close()
	op = openOp(t, o, true)
	defer op.Close()
	// The replay from the checkpoint (after version 1) brings the delete,
	// which the state holds already.
	out, _ = process(t, op, ord(pipeline.OpDelete, 1, "EU", "10.00", 10*time.Second, 2))
	if got := strings.Join(results(t, out), "; "); got != "d 0s EU [<nil> <nil> <nil> false] v2" {
		t.Fatalf("after the restart: %q, want the partial row deleted again at its version", got)
	}
	out, _ = process(t, op, ord(pipeline.OpInsert, 2, "US", "1.00", 66*time.Second, 3))
	for _, r := range results(t, out) {
		if strings.Contains(r, "0s EU") {
			t.Fatalf("the window's close wrote %q for a group without rows", r)
		}
	}
}

// A run without a checkpoint starts over: before its first result it
// truncates the results' table below its generation, which retires what
// an earlier attempt wrote that this one may never write again (a group
// the rows read again do not make). The barrier is written again after a
// restart until it is durable, and only then forgotten.
func TestOperatorStartingOverRetiresEarlierResults(t *testing.T) {
	dir := t.TempDir()
	o := revenue(dir)
	o.Early = time.Nanosecond
	at := func(r pipeline.Record, gen uint64) pipeline.Record { r.Version[0] = gen; return r }
	op := openOp(t, o, false)
	// Generation 0, a first run: nothing can be there to retire.
	out, err := op.Process(context.Background(), []pipeline.Record{at(ord(pipeline.OpInsert, 1, "EU", "10.00", 10*time.Second, 1), 0)})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(results(t, out), "; "); got != "c 0s EU [1 10.00 10.00 true] v1" {
		t.Fatalf("first run: %s", got)
	}
	op.Close()
	// Killed before a checkpoint: the next run starts over, a generation up.
	op = openOp(t, o, false)
	out, err = op.Process(context.Background(), []pipeline.Record{at(ord(pipeline.OpInsert, 2, "US", "1.00", 10*time.Second, 1), 1)})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(results(t, out), "; "); got != "truncate below generation 1; c 0s US [1 1.00 1.00 true] v1" {
		t.Fatalf("started over: %s", got)
	}
	out, err = op.Process(context.Background(), []pipeline.Record{at(ord(pipeline.OpInsert, 3, "US", "2.00", 11*time.Second, 2), 1)})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(results(t, out), "; "); got != "u 0s US [2 3.00 2.00 true] v2" {
		t.Fatalf("the next batch: %s", got)
	}
	if err := op.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	op.Close()
	// Resumed from a checkpoint before the barrier was durable: written
	// again, at the same generation.
	op = openOp(t, o, true)
	out, _ = process(t, op, at(ord(pipeline.OpInsert, 4, "US", "3.00", 12*time.Second, 3), 1))
	if got := strings.Join(results(t, out), "; "); !strings.HasPrefix(got, "truncate below generation 1; ") {
		t.Fatalf("resumed before the barrier was durable: %s", got)
	}
	// Durable now (process settled it): forgotten with the next write.
	process(t, op, at(ord(pipeline.OpInsert, 5, "US", "4.00", 13*time.Second, 4), 1))
	op.Close()
	op = openOp(t, o, true)
	defer op.Close()
	out, _ = process(t, op, at(ord(pipeline.OpInsert, 6, "US", "5.00", 14*time.Second, 5), 1))
	if got := strings.Join(results(t, out), "; "); strings.Contains(got, "truncate") {
		t.Fatalf("resumed after the barrier was durable: %s", got)
	}
}

func TestOperatorSideOutputToASink(t *testing.T) {
	o := revenue(t.TempDir())
	o.SideOutput = "archive"
	op := openOp(t, o, false)
	defer func() { op.Close() }()
	process(t, op, ord(pipeline.OpInsert, 1, "EU", "10.00", 10*time.Second, 1))
	process(t, op, ord(pipeline.OpInsert, 2, "EU", "1.00", 200*time.Second, 2)) // the watermark at 195 s
	late := ord(pipeline.OpInsert, 3, "US", "7.00", 30*time.Second, 3)
	// Killed after the state was written (a checkpoint of earlier
	// positions) but before the batch's outputs were durable: its replay
	// after the restart sends the side row again, though the state skips
	// the change.
	if _, err := op.Process(context.Background(), []pipeline.Record{late}); err != nil {
		t.Fatal(err)
	}
	if err := op.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	op.Close()
	op = openOp(t, o, true)
	out, rj := process(t, op, late)
	if rj != nil {
		t.Fatalf("a named side output is not the dead-letter queue: %v", rj)
	}
	if len(out) != 2 || out[0].Version != late.Version {
		t.Fatalf("the late change and its side row: %+v", out)
	}
	side := out[1]
	if side.Table.ID.String() != "analytics.revenue_late" || side.Dest == nil || !slices.Equal(side.Dest.To, []string{"archive"}) ||
		side.Version != late.Version || !side.Derived() {
		t.Fatalf("side row: %+v", side)
	}
	cols := side.Table.Columns
	if len(cols) != 7 || cols[4].Name != "window_start" || cols[6].Name != "late_by_ms" || !slices.Equal(side.Table.KeyIdx, []int{0, 4}) {
		t.Fatalf("side shape: %+v %v", cols, side.Table.KeyIdx)
	}
	got := fmt.Sprint(side.After[:3], side.After[4].(pipeline.Timestamp).Time().Sub(t0), side.After[5].(pipeline.Timestamp).Time().Sub(t0), side.After[6])
	if got != "[3 US 7.00] 0s 1m0s 135000" {
		t.Fatalf("side row: %s", got)
	}
	// Once that batch is settled (and the next one has written the state
	// that forgets it), another restart's replay sends nothing.
	process(t, op, pipeline.Record{Op: pipeline.OpHeartbeat, EventTime: t0.Add(200 * time.Second)})
	op.Close()
	op = openOp(t, o, true)
	if out, _ := process(t, op, late); len(out) != 1 {
		t.Fatalf("a settled late change sent again: %+v", out[1:])
	}
}

func TestOperatorCorrectsPastTheLateness(t *testing.T) {
	o := revenue(t.TempDir())
	o.Late, o.CorrectWithin = LateCorrect, 10*time.Minute
	// Rows the window no longer holds are retracted from their before
	// images: a table that sends only the key in them is refused.
	op := openOp(t, o, false)
	if _, err := op.Shape(ordersTable); err == nil || !strings.Contains(err.Error(), "REPLICA IDENTITY FULL") {
		t.Fatalf("a key-only before image: %v", err)
	}
	full := *ordersTable
	full.FullBefore = true
	at := func(r pipeline.Record) pipeline.Record { r.Table = &full; return r }
	change := func(op pipeline.Op, id int64, when time.Duration, before, after string, ver uint64) pipeline.Record {
		r := at(ord(op, id, "EU", after, when, ver))
		r.Before = []any{id, "EU", d(before), pipeline.TimestampOf(t0.Add(when))}
		if op == pipeline.OpDelete {
			r.After = nil
		}
		return r
	}
	process(t, op, at(ord(pipeline.OpInsert, 1, "EU", "10.00", 10*time.Second, 1)), at(ord(pipeline.OpInsert, 2, "EU", "5.00", 20*time.Second, 2)))
	// The watermark at 195 s: the first minute closes and, past 30 s of
	// lateness, keeps only its aggregates.
	process(t, op, at(ord(pipeline.OpInsert, 3, "US", "1.00", 200*time.Second, 3)))
	process(t, op, pipeline.Record{Op: pipeline.OpHeartbeat, EventTime: t0.Add(200 * time.Second)})
	if w, g, r := op.eng.Open(); w != 2 || g != 2 || r != 1 {
		t.Fatalf("held: %d windows, %d groups, %d rows; want the retained minute, the open one and order 3", w, g, r)
	}
	steps := []struct {
		name string
		rec  pipeline.Record
		want string
	}{
		{"a late order corrects the minute", at(ord(pipeline.OpInsert, 4, "EU", "7.00", 30*time.Second, 4)), "u 0s EU [3 22.00 10.00] v3"},
		{"an update of a row no longer held: its before image retracted", change(pipeline.OpUpdate, 1, 10*time.Second, "10.00", "1.00", 5), "u 0s EU [3 13.00 7.00] v5"},
		{"a delete likewise", change(pipeline.OpDelete, 2, 20*time.Second, "5.00", "5.00", 6), "u 0s EU [2 8.00 7.00] v6"},
	}
	for _, s := range steps {
		out, rj := process(t, op, s.rec)
		if got := strings.Join(results(t, out), "; "); got != s.want || rj != nil {
			t.Fatalf("%s: %s (rejects %v)", s.name, got, rj)
		}
	}
	// Restarted, the retained aggregates are as they were.
	op.Close()
	op = openOp(t, o, true)
	defer op.Close()
	if out, _ := process(t, op, pipeline.Record{Op: pipeline.OpHeartbeat, EventTime: t0.Add(201 * time.Second)}); strings.Join(results(t, out), "; ") != "u 0s EU [2 8.00 7.00] v6" {
		t.Fatalf("after the restart: %v", results(t, out))
	}
	// A snapshot row may be counted already: it goes to the side output.
	snap := at(ord(pipeline.OpRead, 9, "EU", "3.00", 40*time.Second, 7))
	snap.Snapshot = true
	if _, rj := process(t, op, snap); rj == nil || !strings.Contains(rj.Records[0].Err.Error(), "late:") {
		t.Fatalf("a snapshot row past the lateness: %v", rj)
	}
}

// An update that does not carry a value (an unchanged TOAST value) takes
// it from the row the window holds, also after a restart; with no row
// held it is a dead letter that names the fix.
func TestOperatorTakesUnchangedValuesFromTheRowHeld(t *testing.T) {
	o := revenue(t.TempDir())
	op := openOp(t, o, false)
	process(t, op, pipeline.Record{Op: pipeline.OpShape, Table: ordersTable},
		ord(pipeline.OpInsert, 1, "EU", "10.00", 10*time.Second, 1))
	op.Close()
	op = openOp(t, o, true)
	defer op.Close()
	upd := ord(pipeline.OpUpdate, 1, "US", "10.00", 20*time.Second, 2)
	upd.After[2] = pipeline.UnchangedValue // the amount
	process(t, op, upd)
	out, rj := process(t, op, ord(pipeline.OpInsert, 2, "US", "1.00", 70*time.Second, 3))
	if got := strings.Join(results(t, out), "; "); rj != nil || got != "c 0s US [1 10.00 10.00] v1" {
		t.Fatalf("the moved row with its held amount: %s (%v)", got, rj)
	}
	unknown := ord(pipeline.OpUpdate, 9, "EU", "1.00", 75*time.Second, 4)
	unknown.After[2] = pipeline.UnchangedValue
	_, rj = process(t, op, unknown)
	if rj == nil || len(rj.Records) != 1 || !strings.Contains(rj.Records[0].Err.Error(), "REPLICA IDENTITY FULL") {
		t.Fatalf("an unchanged value with no row held: %v", rj)
	}
}

// A state past max_state_bytes stops the pipeline: the write that takes
// it past (here a checkpoint's) returns a fatal error naming the window
// and the setting.
func TestOperatorStopsPastItsStateCap(t *testing.T) {
	o := revenue(t.TempDir())
	o.MaxStateBytes, o.MaxStateSetting = 256<<10, "transforms[0].window.max_state_bytes"
	var told int64
	o.StateSized = func(n int64) { told = n }
	op := openOp(t, o, false)
	defer op.Close()
	process(t, op, pipeline.Record{Op: pipeline.OpShape, Table: ordersTable})
	id := int64(0)
	for batch := range 100 {
		var recs []pipeline.Record
		for range 100 {
			id++
			recs = append(recs, ord(pipeline.OpInsert, id, fmt.Sprint("region-", id), "1.00", time.Duration(id)*time.Millisecond, uint64(id)))
		}
		if _, err := op.Process(context.Background(), recs); err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
		err := op.Sync(context.Background())
		if err == nil {
			continue
		}
		if !pipeline.IsFatal(err) || !strings.Contains(err.Error(), "transforms[0].window: its state") ||
			!strings.Contains(err.Error(), "raise transforms[0].window.max_state_bytes") {
			t.Fatalf("past the cap: %v (fatal: %v)", err, pipeline.IsFatal(err))
		}
		if told <= 256<<10 {
			t.Fatalf("size told %d", told)
		}
		return
	}
	t.Fatalf("10,000 groups stayed under 256 KiB (%d bytes told)", told)
}

// After a restart the results held are written again with the first
// batch, whose Origin is that batch's (never the newest change the state
// holds, which the replay has not reached: the exactly-once Kafka sink
// would then skip the replayed records below it), and again once the
// replay reaches that change, with an Origin not below it.
func TestOperatorWritesAgainWithoutRunningAheadOfTheReplay(t *testing.T) {
	dir := t.TempDir()
	o := revenue(dir)
	op := openOp(t, o, false)
	process(t, op,
		ord(pipeline.OpInsert, 1, "EU", "10.00", 10*time.Second, 1),
		ord(pipeline.OpInsert, 2, "EU", "5.50", 20*time.Second, 2))
	out, _ := process(t, op, ord(pipeline.OpInsert, 3, "US", "2.00", 66*time.Second, 3))
	if got := strings.Join(results(t, out), "; "); got != "c 0s EU [2 15.50 10.00] v2" {
		t.Fatalf("on close: %s", got)
	}
	op.Close()
	op = openOp(t, o, true)
	defer op.Close()
	// The replay starts at version 2 (the checkpoint covered version 1).
	out, _ = process(t, op, ord(pipeline.OpInsert, 2, "EU", "5.50", 20*time.Second, 2))
	res := resultRecords(out)
	if len(res) != 1 || res[0].Origin != v(2) {
		t.Fatalf("first batch after the restart: %v (Origins %v), want the result once with Origin v2", results(t, out), origins(res))
	}
	out, _ = process(t, op, ord(pipeline.OpInsert, 3, "US", "2.00", 66*time.Second, 3))
	if res := resultRecords(out); len(res) != 1 || res[0].Origin != v(3) {
		t.Fatalf("the replay reaches the newest change: %v (Origins %v), want the result again with Origin v3", results(t, out), origins(res))
	}
	out, _ = process(t, op, ord(pipeline.OpInsert, 4, "US", "1.00", 67*time.Second, 4))
	if res := resultRecords(out); len(res) != 0 {
		t.Fatalf("after the replay: %v, want nothing written again", results(t, out))
	}
}

func resultRecords(recs []pipeline.Record) []pipeline.Record {
	var out []pipeline.Record
	for _, r := range recs {
		if r.Table != nil && r.Table.ID.Table == "revenue" {
			out = append(out, r)
		}
	}
	return out
}

func origins(recs []pipeline.Record) []pipeline.Version {
	var out []pipeline.Version
	for _, r := range recs {
		out = append(out, r.Origin)
	}
	return out
}

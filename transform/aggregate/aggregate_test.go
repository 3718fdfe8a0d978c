package aggregate

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/window"
)

var orders = &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "orders"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "customer_id", Type: pipeline.TypeInt64, Nullable: true},
		{Name: "amount", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2, Nullable: true},
		{Name: "product", Type: pipeline.TypeString, Nullable: true},
	}, KeyIdx: []int{0}, Generation: 1}

var perCustomer = Options{Name: "aggregate:analytics.customer_totals",
	Output: pipeline.TableID{Schema: "analytics", Table: "customer_totals"}, Input: orders.ID,
	GroupBy: []string{"customer_id"},
	Aggregates: []window.AggDef{
		{As: "n", Func: window.CountRows},
		{As: "amounts", Func: window.Count, Column: "amount"},
		{As: "total", Func: window.Sum, Column: "amount"},
		{As: "mean", Func: window.Avg, Column: "amount"},
		{As: "low", Func: window.Min, Column: "amount"},
		{As: "high", Func: window.Max, Column: "amount"},
		{As: "products", Func: window.CountDistinct, Column: "product"},
	}}

func ver(n uint64) pipeline.Version { return pipeline.Version{0, n, 0, 2} }

// cents is a numeric(10,2) value.
func cents(c int64) pipeline.Decimal { return pipeline.Decimal{Unscaled: big.NewInt(c), Scale: 2} }

func order(id, cust int64, amount any, product any) []any { return []any{id, cust, amount, product} }

func ins(v uint64, img []any) pipeline.Record {
	return pipeline.Record{Op: pipeline.OpInsert, Table: orders, Version: ver(v), After: img}
}

func upd(v uint64, img []any) pipeline.Record {
	// A key-only before image, as REPLICA IDENTITY DEFAULT sends.
	return pipeline.Record{Op: pipeline.OpUpdate, Table: orders, Version: ver(v), Before: []any{img[0], nil, nil, nil}, After: img}
}

func del(v uint64, id int64) pipeline.Record {
	return pipeline.Record{Op: pipeline.OpDelete, Table: orders, Version: ver(v), Before: []any{id, nil, nil, nil}}
}

func openRun(t *testing.T, o Options, dir string, resumed bool) *Aggregate {
	t.Helper()
	o.Dir = dir
	a, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Begin(context.Background(), resumed); err != nil {
		_ = a.Close()
		t.Fatal(err)
	}
	return a
}

// results runs a batch and returns its outputs (the records it added).
func results(t *testing.T, a *Aggregate, in ...pipeline.Record) []pipeline.Record {
	t.Helper()
	out, err := a.Process(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < len(in) {
		t.Fatalf("%d records out of %d in", len(out), len(in))
	}
	return out[len(in):]
}

// row is a group's output: op, group, then the aggregates.
func row(r pipeline.Record) []any {
	img := r.After
	if r.Op == pipeline.OpDelete {
		img = r.Before[:1]
	}
	return append([]any{r.Op.String()}, img...)
}

func check(t *testing.T, got []pipeline.Record, want ...[]any) {
	t.Helper()
	if len(got) != len(want) {
		var rows [][]any
		for _, r := range got {
			rows = append(rows, row(r))
		}
		t.Fatalf("%d outputs %v, want %d %v", len(got), rows, len(want), want)
	}
	for i, r := range got {
		if g := row(r); fmt.Sprint(g) != fmt.Sprint(want[i]) {
			t.Errorf("output %d: %v, want %v", i, g, want[i])
		}
	}
}

// Hand-computed results: rows arrive, move between groups, change the
// extremes and leave; each group is written once per batch, deleted when
// its last row leaves.
func TestAggregateByHand(t *testing.T) {
	a := openRun(t, perCustomer, t.TempDir(), false)
	defer a.Close()
	// Customer 1: 10.00 (a), 30.00 (b), 20.00 (a); customer 2: NULL (c).
	out := results(t, a, ins(1, order(1, 1, cents(1000), "a")), ins(2, order(2, 1, cents(3000), "b")),
		ins(3, order(3, 1, cents(2000), "a")), ins(4, order(4, 2, nil, "c")))
	check(t, out,
		[]any{"c", 1, 3, 3, "60.00", "20.00", "10.00", "30.00", 2},
		[]any{"c", 2, 1, 0, nil, nil, nil, nil, 1})
	if out[0].Version != ver(3) || out[1].Version != ver(4) {
		t.Errorf("versions %v %v: want each group's newest change", out[0].Version, out[1].Version)
	}
	if out[0].Table.ID != perCustomer.Output || !reflect.DeepEqual(out[0].Table.KeyIdx, []int{0}) {
		t.Errorf("output table %v key %v", out[0].Table.ID, out[0].Table.KeyIdx)
	}
	// The maximum (order 2, 30.00) moves to customer 2 and drops to
	// 5.00; the minimum of customer 1 (order 1) is updated up.
	out = results(t, a, upd(5, order(2, 2, cents(500), "b")), upd(6, order(1, 1, cents(2500), "a")))
	check(t, out,
		[]any{"u", 1, 2, 2, "45.00", "22.50", "20.00", "25.00", 1},
		[]any{"u", 2, 2, 1, "5.00", "5.00", "5.00", "5.00", 2})
	// The maximum of customer 1 leaves; then its last row.
	check(t, results(t, a, del(7, 1)),
		[]any{"u", 1, 1, 1, "20.00", "20.00", "20.00", "20.00", 1})
	check(t, results(t, a, del(8, 3)), []any{"d", 1})
	// It comes back: an insert again.
	check(t, results(t, a, ins(9, order(5, 1, cents(700), "z"))),
		[]any{"c", 1, 1, 1, "7.00", "7.00", "7.00", "7.00", 1})
}

// Groups that stem from snapshot reads ahead of every stream change
// applied (a later parallel MariaDB reader's rows sort above the stream
// changes written after them) are snapshot records, which the
// exactly-once Kafka sink neither counts in its mark nor skips; groups
// whose Origin is a stream record's are stream records.
func TestAggregateGroupsOfReadsAheadOfTheStreamAreSnapshotRecords(t *testing.T) {
	a := openRun(t, perCustomer, t.TempDir(), false)
	defer a.Close()
	read := func(v uint64, img []any) pipeline.Record {
		return pipeline.Record{Op: pipeline.OpRead, Table: orders, Version: pipeline.Version{0, v, 0, 1}, After: img, Snapshot: true}
	}
	snapshot := func(out []pipeline.Record) []bool {
		var s []bool
		for _, r := range out {
			s = append(s, r.Snapshot)
		}
		return s
	}
	// The later reader's rows, at position 200.
	out := results(t, a, read(200, order(1, 1, cents(1000), "a")), read(200, order(2, 2, cents(500), "b")))
	if got := snapshot(out); !reflect.DeepEqual(got, []bool{true, true}) || out[0].Origin != (pipeline.Version{0, 200, 0, 1}) {
		t.Fatalf("groups of reads: snapshot %v, origin %v", got, out[0].Origin)
	}
	// Stream changes committed before that position, and a read of the
	// same batch: still ahead.
	out = results(t, a, ins(150, order(3, 1, cents(200), "c")), read(200, order(4, 3, cents(100), "d")))
	if got := snapshot(out); !reflect.DeepEqual(got, []bool{true, true}) {
		t.Fatalf("groups of a batch whose read is ahead of its changes: snapshot %v", got)
	}
	out = results(t, a, ins(160, order(5, 2, cents(300), "e")))
	if got := snapshot(out); !reflect.DeepEqual(got, []bool{false}) || out[0].Origin != ver(160) {
		t.Fatalf("groups of stream changes: snapshot %v, origin %v", got, out[0].Origin)
	}
	// A newer stream record of no concern to the aggregate (a heartbeat,
	// another table's change) is in the stream's order too.
	out = results(t, a, ins(170, order(6, 2, cents(300), "f")), pipeline.Record{Op: pipeline.OpHeartbeat, Version: pipeline.Version{0, 180, 0, 0}})
	if got := snapshot(out); !reflect.DeepEqual(got, []bool{false}) || out[0].Origin != (pipeline.Version{0, 180, 0, 0}) {
		t.Fatalf("groups of a batch with a newer heartbeat: snapshot %v, origin %v", got, out[0].Origin)
	}
}

// A change that does not carry a value the aggregate needs (an unchanged
// TOAST value) takes the row's stored one; without one the record is
// rejected and changes nothing.
func TestAggregateUnchangedValues(t *testing.T) {
	a := openRun(t, perCustomer, t.TempDir(), false)
	defer a.Close()
	results(t, a, ins(1, order(1, 1, cents(100), "long text")))
	check(t, results(t, a, upd(2, order(1, 1, cents(200), pipeline.UnchangedValue))),
		[]any{"u", 1, 1, 1, "2.00", "2.00", "2.00", "2.00", 1})
	in := []pipeline.Record{upd(3, order(9, 1, cents(300), pipeline.UnchangedValue))}
	out, err := a.Process(context.Background(), in)
	var rj *pipeline.Rejects
	if !errors.As(err, &rj) || len(rj.Records) != 1 {
		t.Fatalf("err %v, want one rejected record", err)
	}
	if len(out) != 1 {
		t.Fatalf("%d records: the rejected change wrote a group", len(out))
	}
	check(t, results(t, a, ins(4, order(2, 1, cents(100), "x"))),
		[]any{"u", 1, 2, 2, "3.00", "1.50", "1.00", "2.00", 2})
}

// Groups whose values SQL finds equal are one group (5.00 = 5).
func TestAggregateGroupsByValue(t *testing.T) {
	o := perCustomer
	o.GroupBy = []string{"amount"}
	o.Aggregates = []window.AggDef{{As: "n", Func: window.CountRows}}
	a := openRun(t, o, t.TempDir(), false)
	defer a.Close()
	check(t, results(t, a, ins(1, order(1, 1, cents(500), "a")), ins(2, order(2, 1, pipeline.Decimal{Unscaled: big.NewInt(5)}, "b"))),
		[]any{"c", "5.00", 2})
}

// A truncate empties every group: the output is truncated, and a group
// that comes back is written above its last version.
func TestAggregateTruncate(t *testing.T) {
	a := openRun(t, perCustomer, t.TempDir(), false)
	defer a.Close()
	results(t, a, ins(1, order(1, 1, cents(100), "a")))
	results(t, a, ins(2, order(2, 1, cents(100), "a")))
	out := results(t, a, ins(3, order(3, 2, cents(100), "a")),
		pipeline.Record{Op: pipeline.OpTruncate, Table: orders, Version: ver(4)}, ins(5, order(4, 1, cents(900), "q")))
	if len(out) != 3 || out[0].Op != pipeline.OpInsert || out[1].Op != pipeline.OpTruncate || out[1].Table.ID != perCustomer.Output {
		t.Fatalf("outputs %v", out)
	}
	check(t, out[2:], []any{"c", 1, 1, 1, "9.00", "9.00", "9.00", "9.00", 1})
}

// A re-read's sweep (Invariant 14) comes after the rows the read
// emitted: it takes out only the rows below it, those the read did not
// find (order 2, deleted while no change of it reached the pipeline), and
// their groups are written as changed, not cleared.
func TestAggregateSweepKeepsTheRowsAboveIt(t *testing.T) {
	a := openRun(t, perCustomer, t.TempDir(), false)
	defer a.Close()
	results(t, a, ins(1, order(1, 1, cents(100), "a")), ins(2, order(2, 1, cents(300), "b")), ins(3, order(3, 2, cents(500), "c")))
	read := func(v uint64, img []any) pipeline.Record {
		return pipeline.Record{Op: pipeline.OpRead, Table: orders, Version: ver(v), After: img, Snapshot: true, Replaces: true}
	}
	// The re-read, its sweep placed at 10, below its rows at 11.
	out := results(t, a, read(11, order(1, 1, cents(100), "a")), read(11, order(3, 2, cents(700), "c")))
	check(t, out,
		[]any{"u", 1, 2, 2, "4.00", "2.00", "1.00", "3.00", 2},
		[]any{"u", 2, 1, 1, "7.00", "7.00", "7.00", "7.00", 1})
	out = results(t, a, pipeline.Record{Op: pipeline.OpTruncate, Table: orders, Version: ver(10), Snapshot: true, Replaces: true})
	check(t, out, []any{"u", 1, 1, 1, "1.00", "1.00", "1.00", "1.00", 1})
	// A truncate above every row still clears the groups and the output.
	out = results(t, a, pipeline.Record{Op: pipeline.OpTruncate, Table: orders, Version: ver(12)})
	if len(out) != 1 || out[0].Op != pipeline.OpTruncate {
		t.Fatalf("outputs of a truncate above every row: %v", out)
	}
}

func TestAggregateRefusesWhatItCannotCompute(t *testing.T) {
	o := perCustomer
	o.Dir = t.TempDir()
	o.Aggregates = []window.AggDef{{As: "f", Func: window.First, Column: "amount"}}
	if _, err := Open(o); err == nil {
		t.Fatal("first opened without an event time")
	}
	o.Aggregates = []window.AggDef{{As: "s", Func: window.Sum, Column: "product"}}
	a := openRun(t, o, t.TempDir(), false)
	defer a.Close()
	if _, err := a.Shape(orders); err == nil || !strings.Contains(err.Error(), "not a number") {
		t.Fatalf("a sum of text: %v", err)
	}
}

// A run without a checkpoint starts the state over (every row is read
// again, so state left by an earlier attempt would count rows twice); a
// resumed run refuses state built for another definition and names the
// way to rebuild it.
func TestAggregateStartsOverAndRefusesAnotherDefinition(t *testing.T) {
	dir := t.TempDir()
	a := openRun(t, perCustomer, dir, false)
	results(t, a, ins(1, order(1, 1, cents(100), "a")))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a = openRun(t, perCustomer, dir, false)
	check(t, results(t, a, ins(1, order(1, 1, cents(100), "a"))), []any{"c", 1, 1, 1, "1.00", "1.00", "1.00", "1.00", 1})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	other := perCustomer
	other.GroupBy = []string{"product"}
	other.Dir = dir
	b, err := Open(other)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Begin(context.Background(), true); err == nil || !strings.Contains(err.Error(), "--reset-offsets") {
		t.Fatalf("resumed with state of another definition: %v", err)
	}
}

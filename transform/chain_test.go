package transform_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/compute"
	"github.com/sluice-cdc/sluice/transform/filter"
	"github.com/sluice-cdc/sluice/transform/mask"
	"github.com/sluice-cdc/sluice/transform/reshape"
	"github.com/sluice-cdc/sluice/transform/route"
	"github.com/sluice-cdc/sluice/transform/scope"
)

func dec(t *testing.T, s string) pipeline.Decimal {
	d, err := pipeline.ParseDecimal(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A chain of every record transform over a stream whose table changes
// shape twice: a column added with a default for the rows before it (an
// OpShape record, then rows of the new shape), then a column the filter
// reads dropped. Expected records are written out by hand.
func TestChainAcrossSchemaChanges(t *testing.T) {
	id := pipeline.TableID{Schema: "public", Table: "accounts"}
	v1 := &pipeline.Table{ID: id, Generation: 1, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "owner", Type: pipeline.TypeString, Nullable: true},
		{Name: "balance", Type: pipeline.TypeDecimal, Precision: 30, Scale: 2, Nullable: true},
		{Name: "secret", Type: pipeline.TypeString, Nullable: true},
	}}
	v2 := &pipeline.Table{ID: id, Generation: 2, KeyIdx: []int{0}, Columns: append(append([]pipeline.Column(nil), v1.Columns...),
		pipeline.Column{Name: "tier", Type: pipeline.TypeString, Nullable: true, Missing: "basic"})}
	v3 := &pipeline.Table{ID: id, Generation: 3, KeyIdx: []int{0}, Columns: []pipeline.Column{v2.Columns[0], v2.Columns[2], v2.Columns[3], v2.Columns[4]}}

	all := scope.Tables{}
	comp, err := compute.New("transforms[2].compute", all, scope.DLQ, compute.Options{Column: "cents", Type: "decimal(32,0)", Expr: `after.balance * 100`})
	if err != nil {
		t.Fatal(err)
	}
	msk, err := mask.New("transforms[3].mask", all, scope.DLQ, mask.Options{Columns: []string{"owner"}, With: "keep_last", Last: 2})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := route.New("transforms[4].route", all, scope.DLQ, route.Options{
		Rules: []route.Rule{{When: `after.balance > decimal("1000000000000000.00")`, Sinks: []string{"big"}}}, Sinks: []string{"big", "all"}})
	if err != nil {
		t.Fatal(err)
	}
	ops := []pipeline.Operator{
		filter.New("transforms[0].filter", all, `after.owner != "test"`, scope.DLQ),
		reshape.New("transforms[1].project", all, scope.DLQ, reshape.Project(nil, []string{"secret"})),
		comp, msk, rt,
	}
	huge := dec(t, "12345678901234567.89") // beyond a float's 15-16 digits
	in := []pipeline.Record{
		{Op: pipeline.OpInsert, Table: v1, After: []any{int64(1), "alice", huge, "s1"}, Version: pipeline.Version{1}},
		{Op: pipeline.OpInsert, Table: v1, After: []any{int64(2), "test", dec(t, "1.00"), "s2"}, Version: pipeline.Version{2}},
		{Op: pipeline.OpUpdate, Table: v1, After: []any{int64(3), nil, nil, pipeline.UnchangedValue}, Version: pipeline.Version{3}},
		{Op: pipeline.OpShape, Table: v2, Version: pipeline.Version{4}},
		{Op: pipeline.OpUpdate, Table: v2, After: []any{int64(1), pipeline.UnchangedValue, dec(t, "0.10"), "s1", "gold"}, Version: pipeline.Version{5}},
		{Op: pipeline.OpDelete, Table: v2, Before: []any{int64(2), nil, nil, nil, nil}, Version: pipeline.Version{6}},
		{Op: pipeline.OpInsert, Table: v3, After: []any{int64(4), dec(t, "5.00"), "s4", "gold"}, Version: pipeline.Version{7}},
	}
	recs := append([]pipeline.Record(nil), in...)
	var rejected []pipeline.Rejected
	for _, op := range ops {
		out, err := op.Process(context.Background(), recs)
		var rj *pipeline.Rejects
		if errors.As(err, &rj) {
			rejected = append(rejected, rj.Records...)
		} else if err != nil {
			t.Fatal(err)
		}
		recs = out
	}

	// Rejected, in the order the operators met them: the filter reads an
	// owner the update does not carry (never a silent NULL), and cannot
	// read owner at all in the third shape; the compute multiplies a NULL.
	if len(rejected) != 3 {
		t.Fatalf("%d rejected: %+v", len(rejected), rejected)
	}
	for i, w := range []struct {
		version uint64
		err     string
	}{{5, "after.owner: the change does not carry this value"}, {7, `column "owner" of public.accounts does not exist`}, {3, "NULL"}} {
		if rejected[i].Record.Version[0] != w.version || !strings.Contains(rejected[i].Err.Error(), w.err) {
			t.Errorf("rejection %d: version %v, %v; want version %d, %q", i, rejected[i].Record.Version, rejected[i].Err, w.version, w.err)
		}
	}

	if len(recs) != 3 {
		t.Fatalf("%d records out: %+v", len(recs), recs)
	}
	names := func(tb *pipeline.Table) string {
		var n []string
		for _, c := range tb.Columns {
			n = append(n, c.Name+":"+c.Type.String())
		}
		return strings.Join(n, " ")
	}
	o1, o2 := recs[0].Table, recs[1].Table
	if got := names(o1); got != "id:int64 owner:string balance:decimal cents:decimal" || o1.Generation != 1 {
		t.Fatalf("first shape: %s", got)
	}
	if got := names(o2); got != "id:int64 owner:string balance:decimal tier:string cents:decimal" || o2.Columns[3].Missing != "basic" ||
		o2.Generation != 2 || !reflect.DeepEqual(o2.KeyIdx, []int{0}) {
		t.Fatalf("second shape: %s (%+v)", got, o2.Columns)
	}
	want := []pipeline.Record{
		// Masked to its last two characters, the exact product, and the
		// big sink only (an insert needs no delete elsewhere).
		{Op: pipeline.OpInsert, Table: o1, After: []any{int64(1), "***ce", huge, dec(t, "1234567890123456789")},
			Version: pipeline.Version{1}, Dest: &pipeline.Dest{To: []string{"big"}}},
		// The new shape reaches the sinks, reshaped.
		{Op: pipeline.OpShape, Table: o2, Version: pipeline.Version{4}},
		// A delete goes to every sink; its old image has NULL in the
		// computed column.
		{Op: pipeline.OpDelete, Table: o2, Before: []any{int64(2), nil, nil, nil, nil}, Version: pipeline.Version{6}},
	}
	for i := range want {
		if !reflect.DeepEqual(recs[i], want[i]) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, recs[i], want[i])
		}
	}
}

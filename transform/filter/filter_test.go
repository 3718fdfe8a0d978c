package filter

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/scope"
)

var customers = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "customers"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "country", Type: pipeline.TypeString, Nullable: true},
		{Name: "bio", Type: pipeline.TypeString, Nullable: true},
	},
	KeyIdx: []int{0},
}

var orders = &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "orders"},
	Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}}, KeyIdx: []int{0}}

func rec(op pipeline.Op, v uint64, before, after []any) pipeline.Record {
	return pipeline.Record{Op: op, Table: customers, Before: before, After: after, Version: pipeline.Version{0, v, 0, 2}}
}

func newFilter(t *testing.T, where string, policy scope.Policy) *Filter {
	tables, err := scope.NewTables([]string{"public.customers"})
	if err != nil {
		t.Fatal(err)
	}
	return New("transforms[0].filter", tables, where, policy)
}

func TestFilterByOperation(t *testing.T) {
	f := newFilter(t, `after.country == "DE"`, scope.DLQ)
	de := []any{int64(1), "DE", "x"}
	fr := []any{int64(1), "FR", "x"}
	null := []any{int64(2), nil, nil}
	reread := func(v uint64, after []any) pipeline.Record {
		r := rec(pipeline.OpRead, v, nil, after)
		r.Snapshot, r.Replaces = true, true
		return r
	}
	in := []pipeline.Record{
		rec(pipeline.OpInsert, 1, nil, de), // kept
		rec(pipeline.OpInsert, 2, nil, fr), // dropped
		rec(pipeline.OpRead, 3, nil, null), // dropped: NULL is not "DE"
		rec(pipeline.OpUpdate, 4, de, de),  // kept
		rec(pipeline.OpUpdate, 5, nil, fr), // stops matching: a delete
		rec(pipeline.OpDelete, 6, fr, nil), // always kept
		{Op: pipeline.OpTruncate, Table: customers, Version: pipeline.Version{0, 7}},
		{Op: pipeline.OpHeartbeat},
		{Op: pipeline.OpInsert, Table: orders, After: []any{int64(9)}}, // not in scope
		reread(10, de), // a re-snapshot's row that matches: kept
		reread(11, fr), // one a sink may hold that no longer matches: a delete
	}
	want := []pipeline.Record{
		in[0], in[3],
		{Op: pipeline.OpDelete, Table: customers, Before: fr, Version: pipeline.Version{0, 5, 0, 2}},
		in[5], in[6], in[7], in[8], in[9],
		{Op: pipeline.OpDelete, Table: customers, Before: fr, Version: pipeline.Version{0, 11, 0, 2}, Snapshot: true, Replaces: true},
	}
	got, err := f.Process(context.Background(), append([]pipeline.Record(nil), in...))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
}

func TestFilterErrorsFollowThePolicy(t *testing.T) {
	// An unchanged TOAST value the expression reads: never a silent NULL.
	in := []pipeline.Record{
		rec(pipeline.OpUpdate, 1, nil, []any{int64(1), "DE", pipeline.UnchangedValue}),
		rec(pipeline.OpInsert, 2, nil, []any{int64(2), "DE", "long"}),
	}
	f := newFilter(t, `len(after.bio) > 2`, scope.DLQ)
	got, err := f.Process(context.Background(), append([]pipeline.Record(nil), in...))
	var rj *pipeline.Rejects
	if !errors.As(err, &rj) || len(rj.Records) != 1 || rj.Records[0].Record.Version != in[0].Version ||
		!strings.Contains(rj.Records[0].Err.Error(), "after.bio") || !strings.Contains(rj.Records[0].Err.Error(), "transforms[0].filter") {
		t.Fatalf("rejects = %v", err)
	}
	if len(got) != 1 || got[0].Version != in[1].Version {
		t.Fatalf("output = %+v", got)
	}
	f = newFilter(t, `len(after.bio) > 2`, scope.Fail)
	if _, err := f.Process(context.Background(), append([]pipeline.Record(nil), in...)); err == nil || errors.As(err, &rj) {
		t.Fatalf("fail policy: %v, want a plain error", err)
	}
}

func TestFilterAfterASchemaChange(t *testing.T) {
	f := newFilter(t, `after.country == "DE"`, scope.DLQ)
	if _, err := f.Shape(customers); err != nil {
		t.Fatal(err)
	}
	// The column is dropped at the source: the new shape's records are
	// rejected with an error naming the operator, table and column.
	dropped := &pipeline.Table{ID: customers.ID, Columns: customers.Columns[:1], KeyIdx: []int{0}, Generation: 2}
	_, err := f.Shape(dropped)
	var fe *scope.FieldError
	if !errors.As(err, &fe) || fe.Field != "where" || !strings.Contains(err.Error(), `column "country" of public.customers does not exist`) {
		t.Fatalf("shape check: %v", err)
	}
	_, err = f.Process(context.Background(), []pipeline.Record{{Op: pipeline.OpInsert, Table: dropped, After: []any{int64(1)}}})
	var rj *pipeline.Rejects
	if !errors.As(err, &rj) || !strings.Contains(rj.Records[0].Err.Error(), "country") {
		t.Fatalf("process after the change: %v", err)
	}
}

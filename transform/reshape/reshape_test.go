package reshape

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/scope"
)

func dec(t *testing.T, s string) pipeline.Decimal {
	d, err := pipeline.ParseDecimal(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func accounts(t *testing.T) *pipeline.Table {
	return &pipeline.Table{
		ID: pipeline.TableID{Schema: "public", Table: "accounts"},
		Columns: []pipeline.Column{
			{Name: "id", Type: pipeline.TypeInt64, Key: true},
			{Name: "balance", Type: pipeline.TypeDecimal, Precision: 30, Scale: 2, Nullable: true},
			{Name: "secret", Type: pipeline.TypeString, Nullable: true},
			{Name: "code", Type: pipeline.TypeString, Missing: "42"},
		},
		KeyIdx: []int{0}, Generation: 3,
	}
}

func run(t *testing.T, op *Op, in ...pipeline.Record) ([]pipeline.Record, error) {
	t.Helper()
	return op.Process(context.Background(), in)
}

func all() scope.Tables { return scope.Tables{} }

func TestProject(t *testing.T) {
	tb := accounts(t)
	big := dec(t, "12345678901234567.89")
	row := []any{int64(1), big, "s", pipeline.UnchangedValue}
	for name, op := range map[string]*Op{
		"drop": New("p", all(), scope.DLQ, Project(nil, []string{"secret", "absent"})),
		"keep": New("p", all(), scope.DLQ, Project([]string{"id", "balance", "code"}, nil)),
	} {
		out, err := run(t, op, pipeline.Record{Op: pipeline.OpUpdate, Table: tb, After: row, Version: pipeline.Version{1}})
		if err != nil {
			t.Fatal(err)
		}
		r := out[0]
		if got := []string{r.Table.Columns[0].Name, r.Table.Columns[1].Name, r.Table.Columns[2].Name}; len(r.Table.Columns) != 3 ||
			!reflect.DeepEqual(got, []string{"id", "balance", "code"}) {
			t.Errorf("%s: columns %v", name, r.Table.Columns)
		}
		if !reflect.DeepEqual(r.After, []any{int64(1), big, pipeline.UnchangedValue}) || r.Version != (pipeline.Version{1}) ||
			!reflect.DeepEqual(r.Table.KeyIdx, []int{0}) || r.Table.Generation != 3 {
			t.Errorf("%s: record %+v", name, r)
		}
		// One output shape per input shape.
		again, _ := run(t, op, pipeline.Record{Op: pipeline.OpInsert, Table: tb, After: row})
		if again[0].Table != r.Table {
			t.Errorf("%s: a new output shape for the same input shape", name)
		}
	}
	_, err := New("p", all(), scope.DLQ, Project(nil, []string{"id"})).Shape(tb)
	if err == nil || !strings.Contains(err.Error(), "primary key") {
		t.Errorf("dropping the key: %v", err)
	}
	_, err = New("p", all(), scope.DLQ, Project([]string{"balance", "nope"}, nil)).Shape(tb)
	if err == nil || !strings.Contains(err.Error(), `column "nope"`) {
		t.Errorf("keeping an unknown column: %v", err)
	}
}

func TestRename(t *testing.T) {
	tb := accounts(t)
	op := New("r", all(), scope.DLQ, Rename("crm.{table}_v2", []ColumnRename{{"id", "account_id"}, {"secret", "note"}}))
	out, err := run(t, op, pipeline.Record{Op: pipeline.OpDelete, Table: tb, Before: []any{int64(5), nil, nil, nil}},
		pipeline.Record{Op: pipeline.OpTruncate, Table: tb})
	if err != nil {
		t.Fatal(err)
	}
	o := out[0].Table
	if o.ID.Schema != "crm" || o.ID.Table != "accounts_v2" || o.Columns[0].Name != "account_id" || !o.Columns[0].Key ||
		o.Columns[2].Name != "note" || !reflect.DeepEqual(o.KeyIdx, []int{0}) || out[1].Table != o {
		t.Fatalf("renamed shape %+v", o)
	}
	if _, err := New("r", all(), scope.DLQ, Rename("", []ColumnRename{{"secret", "code"}})).Shape(tb); err == nil {
		t.Error("two columns named code were allowed")
	}
}

func TestCast(t *testing.T) {
	tb := accounts(t)
	op := New("c", all(), scope.DLQ, Cast([]ColumnCast{{"balance", "string"}, {"code", "int32"}}))
	out, err := run(t, op,
		pipeline.Record{Op: pipeline.OpInsert, Table: tb, After: []any{int64(1), dec(t, "12345678901234567.89"), nil, "7"}},
		pipeline.Record{Op: pipeline.OpInsert, Table: tb, After: []any{int64(2), nil, nil, "seven"}},
	)
	var rj *pipeline.Rejects
	if !errors.As(err, &rj) || len(rj.Records) != 1 || !strings.Contains(rj.Records[0].Err.Error(), "code") {
		t.Fatalf("rejects %v", err)
	}
	if len(out) != 1 || !reflect.DeepEqual(out[0].After, []any{int64(1), "12345678901234567.89", nil, int64(7)}) {
		t.Fatalf("out %+v", out)
	}
	o := out[0].Table
	if o.Columns[1].Type != pipeline.TypeString || o.Columns[3].Type != pipeline.TypeInt32 || o.Columns[3].Missing != int64(42) {
		t.Fatalf("cast shape %+v", o.Columns)
	}
	for _, c := range []struct{ from, to, v, want string }{
		{"balance", "int64", "12.00", "12"},
		{"balance", "int64", "12.50", "has a fraction"},
		{"balance", "decimal(5,1)", "12.25", "12.3"},
		{"balance", "decimal(3,1)", "1234.5", "does not fit"},
		{"balance", "float64", "0.5", "0.5"},
	} {
		op := New("c", all(), scope.DLQ, Cast([]ColumnCast{{c.from, c.to}}))
		out, err := run(t, op, pipeline.Record{Op: pipeline.OpInsert, Table: tb, After: []any{int64(1), dec(t, c.v), nil, "1"}})
		got := ""
		if err != nil {
			got = err.(*pipeline.Rejects).Records[0].Err.Error()
		} else {
			got = toText(out[0].After[1])
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("%s %s → %s = %q, want %q", c.from, c.v, c.to, got, c.want)
		}
	}
	if _, err := New("c", all(), scope.DLQ, Cast([]ColumnCast{{"id", "string"}})).Shape(tb); err == nil {
		t.Error("a key column was cast")
	}
}

func toText(v any) string { return fmt.Sprint(v) }

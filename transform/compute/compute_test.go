package compute

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/scope"
)

var lines = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "lines"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "price", Type: pipeline.TypeDecimal, Precision: 30, Scale: 2, Nullable: true},
		{Name: "qty", Type: pipeline.TypeInt32},
		{Name: "at", Type: pipeline.TypeTimestampTZ},
	},
	KeyIdx: []int{0},
}

func TestComputeDecimalsBeyondFloats(t *testing.T) {
	op, err := New("c", scope.Tables{}, scope.DLQ, Options{Column: "total", Type: "decimal(38,2)", Expr: `after.price * after.qty`})
	if err != nil {
		t.Fatal(err)
	}
	price, _ := pipeline.ParseDecimal("12345678901234567.89")
	at := pipeline.TimestampOf(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	out, err := op.Process(context.Background(), []pipeline.Record{
		{Op: pipeline.OpInsert, Table: lines, After: []any{int64(1), price, int64(3), at}},
		{Op: pipeline.OpInsert, Table: lines, After: []any{int64(2), nil, int64(3), at}},
		{Op: pipeline.OpDelete, Table: lines, Before: []any{int64(3), nil, nil, nil}},
	})
	var rj *pipeline.Rejects
	if !errors.As(err, &rj) || len(rj.Records) != 1 || !strings.Contains(rj.Records[0].Err.Error(), "NULL") {
		t.Fatalf("rejects: %v", err)
	}
	o := out[0].Table
	if got := o.Columns[4]; got.Name != "total" || got.Type != pipeline.TypeDecimal || got.Precision != 38 || got.Scale != 2 || !got.Nullable {
		t.Fatalf("computed column %+v", got)
	}
	if d := out[0].After[4].(pipeline.Decimal); d.String() != "37037036703703703.67" {
		t.Fatalf("total = %s", d)
	}
	if len(out) != 2 || out[1].Op != pipeline.OpDelete || !reflect.DeepEqual(out[1].Before, []any{int64(3), nil, nil, nil, nil}) {
		t.Fatalf("delete: %+v", out[1:])
	}
}

func TestComputeChecksTypes(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Column: "n", Type: "int64", Expr: `string(after.qty)`}, "gives string, which a int64 column cannot hold"},
		{Options{Column: "qty", Type: "int64", Expr: `1`}, "a computed column needs a name of its own"},
		{Options{Column: "id", Type: "int64", Expr: `1`}, "primary-key column"},
		{Options{Column: "day", Type: "date", Expr: `after.at`}, ""},
		{Options{Column: "n", Type: "int64", Expr: `after.qtty + 1`}, `column "qtty" of public.lines does not exist`},
	} {
		op, err := New("c", scope.Tables{}, scope.DLQ, c.o)
		if err != nil {
			t.Fatal(err)
		}
		_, err = op.Shape(lines)
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.o, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
		var ee *eval.Error
		if strings.Contains(c.want, "qtty") && (!errors.As(err, &ee) || ee.Line != 1 || ee.Col != 1) {
			t.Errorf("the unknown column is not positioned: %v", err)
		}
	}
	if _, err := New("c", scope.Tables{}, scope.DLQ, Options{Column: "x", Type: "money", Expr: `1`}); err == nil {
		t.Error("an unknown type was taken")
	}
}

package mask

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/scope"
)

var people = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "people"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "email", Type: pipeline.TypeString, Nullable: true, Missing: "old@example.com"},
		{Name: "card", Type: pipeline.TypeString},
		{Name: "salary", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2},
	},
	KeyIdx: []int{0},
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func mac(key, s string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))
}

func TestMaskWays(t *testing.T) {
	salary, _ := pipeline.ParseDecimal("1234.50")
	after := []any{int64(1), "jane.doe@example.com", "4111111111111111", salary}
	before := []any{int64(1), nil, pipeline.UnchangedValue, salary}
	for _, c := range []struct {
		o           Options
		want, prior []any
		typ         pipeline.Type
	}{
		{Options{Columns: []string{"email"}, With: "email"},
			[]any{int64(1), "j***@example.com", "4111111111111111", salary}, nil, pipeline.TypeString},
		{Options{Columns: []string{"card"}, With: "keep_last", Last: 4},
			[]any{int64(1), "jane.doe@example.com", "************1111", salary}, nil, pipeline.TypeString},
		{Options{Columns: []string{"email", "salary"}, With: "sha256"},
			[]any{int64(1), sum("jane.doe@example.com"), "4111111111111111", sum("1234.50")},
			[]any{int64(1), nil, pipeline.UnchangedValue, sum("1234.50")}, pipeline.TypeString},
		{Options{Columns: []string{"email"}, With: "hmac", Secret: []byte("k")},
			[]any{int64(1), mac("k", "jane.doe@example.com"), "4111111111111111", salary}, nil, pipeline.TypeString},
		{Options{Columns: []string{"salary", "absent"}, With: "null"},
			[]any{int64(1), "jane.doe@example.com", "4111111111111111", nil}, nil, pipeline.TypeDecimal},
		{Options{Columns: []string{"card"}, With: "fixed", Value: "redacted"},
			[]any{int64(1), "jane.doe@example.com", "redacted", salary}, nil, pipeline.TypeString},
	} {
		op, err := New("m", scope.Tables{}, scope.DLQ, c.o)
		if err != nil {
			t.Fatal(err)
		}
		out, err := op.Process(context.Background(), []pipeline.Record{{Op: pipeline.OpUpdate, Table: people, Before: before, After: after}})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out[0].After, c.want) {
			t.Errorf("%s: after %v, want %v", c.o.With, out[0].After, c.want)
		}
		if c.prior != nil && !reflect.DeepEqual(out[0].Before, c.prior) {
			t.Errorf("%s: before %v, want %v", c.o.With, out[0].Before, c.prior)
		}
		col := out[0].Table.Columns[len(out[0].Table.Columns)-1]
		if c.o.Columns[len(c.o.Columns)-1] == "salary" && col.Type != c.typ {
			t.Errorf("%s: salary's type %s, want %s", c.o.With, col.Type, c.typ)
		}
		if c.o.With == "null" && !col.Nullable {
			t.Errorf("null: the column stays NOT NULL")
		}
	}
	// Rows that predate email hold its Missing value: masked too.
	op, _ := New("m", scope.Tables{}, scope.DLQ, Options{Columns: []string{"email"}, With: "sha256"})
	shape, err := op.Shape(people)
	if err != nil || shape.Columns[1].Missing != sum("old@example.com") {
		t.Fatalf("missing value: %v, %v", shape.Columns[1].Missing, err)
	}
}

func TestMaskRefuses(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Columns: []string{"id"}, With: "sha256"}, "primary key"},
		{Options{Columns: []string{"salary"}, With: "keep_last", Last: 2}, "keep_last masks text"},
		{Options{Columns: []string{"salary"}, With: "fixed", Value: "lots"}, "not a decimal value"},
	} {
		op, err := New("m", scope.Tables{}, scope.DLQ, c.o)
		if err == nil {
			_, err = op.Shape(people)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	if _, err := New("m", scope.Tables{}, scope.DLQ, Options{Columns: []string{"email"}, With: "hmac"}); err == nil {
		t.Error("hmac without a secret")
	}
}

package eval

import (
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

func table() *pipeline.Table {
	return &pipeline.Table{
		ID: pipeline.TableID{Schema: "public", Table: "customers"},
		Columns: []pipeline.Column{
			{Name: "id", Type: pipeline.TypeInt64, Key: true},
			{Name: "email", Type: pipeline.TypeString, Nullable: true},
			{Name: "balance", Type: pipeline.TypeDecimal, Precision: 30, Scale: 2, Nullable: true},
			{Name: "seen", Type: pipeline.TypeTimestampTZ, Nullable: true},
			{Name: "notes", Type: pipeline.TypeString, Nullable: true},
			{Name: "vip", Type: pipeline.TypeBool},
		},
		KeyIdx: []int{0},
	}
}

func dec(t *testing.T, s string) pipeline.Decimal {
	t.Helper()
	d, err := pipeline.ParseDecimal(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func record(t *testing.T, op pipeline.Op, after []any) *pipeline.Record {
	return &pipeline.Record{Op: op, Table: table(), After: after, EventTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func compile(t *testing.T, src string, tb *pipeline.Table, want Want) *Program {
	t.Helper()
	p, err := Compile(src, tb, want)
	if err != nil {
		t.Fatalf("compile %q: %v", src, err)
	}
	return p
}

func TestPredicates(t *testing.T) {
	tb := table()
	ts := pipeline.TimestampOf(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC))
	row := []any{int64(7), "a@b.example", dec(t, "10.50"), ts, nil, true}
	nullRow := []any{int64(8), nil, nil, nil, nil, false}
	for _, c := range []struct {
		src       string
		row, null bool
	}{
		{`after.email == "a@b.example"`, true, false},
		{`after.email != "a@b.example"`, false, true},
		{`after.email == nil`, false, true},
		{`after.vip && op == "c"`, true, false},
		{`after.balance > 10`, true, false},
		{`after.balance == 10.5`, true, false},
		{`after.balance == decimal("10.5")`, true, false},
		{`after.balance >= decimal("10.51")`, false, false},
		{`after.seen > date("2025-01-01")`, true, false},
		{`(after.email ?? "") endsWith ".example"`, true, false},
		{`table == "customers" && schema == "public"`, true, true},
		{`commit_time.Year() == 2026`, true, true},
		{`after.id in [7, 9]`, true, false},
	} {
		p := compile(t, c.src, tb, WantBool)
		got, err := p.Bool(record(t, pipeline.OpInsert, row))
		if err != nil || got != c.row {
			t.Errorf("%s on a full row = %v, %v; want %v", c.src, got, err, c.row)
		}
		if strings.Contains(c.src, "balance >") || strings.Contains(c.src, "seen >") || strings.Contains(c.src, "balance >=") {
			continue // an ordering of NULL is an error (TestNullErrors)
		}
		got, err = p.Bool(record(t, pipeline.OpInsert, nullRow))
		if err != nil || got != c.null {
			t.Errorf("%s on a row of NULLs = %v, %v; want %v", c.src, got, err, c.null)
		}
	}
}

func TestDecimalsStayExact(t *testing.T) {
	tb := table()
	r := record(t, pipeline.OpInsert, []any{int64(1), nil, dec(t, "12345678901234567.89"), nil, nil, false})
	for src, want := range map[string]string{
		`after.balance * 3`:                   "37037036703703703.67",
		`after.balance + decimal("0.01")`:     "12345678901234567.90",
		`after.balance - 1`:                   "12345678901234566.89",
		`decimal_round(after.balance, 1)`:     "12345678901234567.9",
		`after.balance / 4`:                   "3086419725308641.9725",
		`decimal("1") / 3`:                    "0.3333333333333333333333333333333333",
		`decimal_round(decimal("2.345"), 2)`:  "2.35",
		`decimal_round(decimal("-2.345"), 2)`: "-2.35",
	} {
		v, err := compile(t, src, tb, nil).Eval(r)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		d, ok := v.(pipeline.Decimal)
		if !ok || d.String() != want {
			t.Errorf("%s = %v (%T), want %s", src, v, v, want)
		}
	}
	if _, err := compile(t, `after.balance / 0`, tb, nil).Eval(r); err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Errorf("division by zero: %v", err)
	}
	v, err := compile(t, `after.balance * 1.5`, tb, nil).Eval(r)
	if f, ok := v.(float64); err != nil || !ok || f != 12345678901234567.89*1.5 {
		t.Errorf("decimal times float = %v (%T), %v; want a float", v, v, err)
	}
}

func TestNullErrors(t *testing.T) {
	tb := table()
	r := record(t, pipeline.OpInsert, []any{int64(1), nil, nil, nil, nil, false})
	for src, col := range map[string]string{
		`after.email + "x"`:         "after.email",
		`after.balance * 2`:         "NULL",
		`upper(after.notes) == "A"`: "after.notes",
	} {
		_, err := compile(t, src, tb, nil).Eval(r)
		if err == nil || !strings.Contains(err.Error(), col) {
			t.Errorf("%s on NULLs: %v, want an error naming %s", src, err, col)
		}
	}
}

func TestUnchangedIsAnError(t *testing.T) {
	tb := table()
	r := record(t, pipeline.OpUpdate, []any{int64(1), "x", nil, nil, pipeline.UnchangedValue, false})
	p := compile(t, `after.notes == "a"`, tb, WantBool)
	_, err := p.Bool(r)
	var ve *valueError
	if !errors.As(err, &ve) || ve.col != "after.notes" || !strings.Contains(err.Error(), "REPLICA IDENTITY FULL") {
		t.Fatalf("reading an unchanged value: %v", err)
	}
	// Other columns of the record read as usual.
	if ok, err := compile(t, `after.email == "x"`, tb, WantBool).Bool(r); !ok || err != nil {
		t.Fatalf("reading another column: %v, %v", ok, err)
	}
}

func TestCompileErrorsArePositioned(t *testing.T) {
	tb := table()
	for _, c := range []struct {
		src       string
		line, col int
		msg       string
	}{
		{`after.emial == "x"`, 1, 1, `column "emial" of public.customers does not exist; its columns: id, email`},
		{`op == "c" && after.Email == "x"`, 1, 14, `did you mean "email"`},
		{`after.email > 5`, 1, 13, `invalid operation: > (mismatched types string and int)`},
		{"after.vip &&\n  lowr(after.email) == \"x\"", 2, 3, `unknown name lowr`},
		{`after == nil`, 1, 1, `after is a row image`},
		{`after.balance + "x"`, 1, 15, `invalid operation`},
	} {
		_, err := Compile(c.src, tb, nil)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: %v, want an *Error", c.src, err)
			continue
		}
		if e.Line != c.line || e.Col != c.col || !strings.Contains(e.Msg, c.msg) {
			t.Errorf("%q: %d:%d %s; want %d:%d %s", c.src, e.Line, e.Col, e.Msg, c.line, c.col, c.msg)
		}
	}
	if _, err := Compile(`after.email`, tb, WantBool); err == nil || !strings.Contains(err.Error(), "gives string, want a bool") {
		t.Errorf("a non-bool predicate: %v", err)
	}
}

func TestValuesAsExpressionsSeeThem(t *testing.T) {
	big1 := new(big.Int)
	big1.SetString("123456789012345678901234567890", 10)
	for _, c := range []struct {
		col  pipeline.Column
		v    any
		want any
	}{
		{pipeline.Column{Name: "j", Type: pipeline.TypeJSON}, pipeline.JSON(`{"a":1}`), `{"a":1}`},
		{pipeline.Column{Name: "u", Type: pipeline.TypeUUID}, pipeline.UUID{1, 2}, "01020000-0000-0000-0000-000000000000"},
		{pipeline.Column{Name: "d", Type: pipeline.TypeDate}, pipeline.Date{Days: 1}, time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC)},
		{pipeline.Column{Name: "t", Type: pipeline.TypeTime}, pipeline.TimeOfDay(1500000), 1500 * time.Millisecond},
		{pipeline.Column{Name: "n", Type: pipeline.TypeDecimal}, pipeline.Decimal{Unscaled: big1}, pipeline.Decimal{Unscaled: big1}},
	} {
		got, err := ValueOf(&c.col, c.v, "after")
		if err != nil {
			t.Fatalf("%s: %v", c.col.Name, err)
		}
		if gd, ok := got.(pipeline.Decimal); ok {
			if !gd.Equal(c.want.(pipeline.Decimal)) {
				t.Errorf("%s = %v, want %v", c.col.Name, got, c.want)
			}
			continue
		}
		if gt, ok := got.(time.Time); ok {
			if !gt.Equal(c.want.(time.Time)) {
				t.Errorf("%s = %v, want %v", c.col.Name, got, c.want)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%s = %#v, want %#v", c.col.Name, got, c.want)
		}
	}
	if _, err := ValueOf(&pipeline.Column{Name: "ts", Type: pipeline.TypeTimestamp}, pipeline.Timestamp{Special: pipeline.PosInfinity}, "after"); err == nil {
		t.Error("an infinite timestamp read as a time")
	}
}

func TestCheckWithoutAShape(t *testing.T) {
	for src, want := range map[string]string{
		`after.a == 1`:                      "",
		`lower(after.email) endsWith ".de"`: "",
		`decimal_round(after.x, 2) > 1`:     "",
		"after.a &&\n  lowr(after.b)":       "2:3: unknown function lowr",
		`after.a == `:                       "1:",
		`len(after.a) + frobnicate(1)`:      "1:16: unknown function frobnicate",
	} {
		err := Check(src)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Check(%q) = %v, want %q", src, err, want)
		}
	}
}

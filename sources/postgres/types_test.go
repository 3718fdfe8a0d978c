package postgres

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

func tsOf(y int, mo time.Month, d, h, mi, s, us int) pipeline.Timestamp {
	return pipeline.Timestamp{Micros: time.Date(y, mo, d, h, mi, s, us*1000, time.UTC).UnixMicro()}
}

func dateOf(y int, mo time.Month, d int) pipeline.Date {
	return pipeline.DateOf(time.Date(y, mo, d, 0, 0, 0, 0, time.UTC))
}

func builtinCol(t *testing.T, oid uint32) ColumnInfo {
	t.Helper()
	info, ok := builtinTypeInfo(oid)
	if !ok {
		t.Fatalf("oid %d not built in", oid)
	}
	return ColumnInfo{Name: "c", OID: oid, TypMod: -1, Type: info}
}

// typeCase is one column of the round-trip table: a SQL type, a literal
// and the exact value the record model must hold.
type typeCase struct {
	typ, lit string
	want     any
}

var posInfTS = pipeline.Timestamp{Special: pipeline.PosInfinity}
var negInfTS = pipeline.Timestamp{Special: pipeline.NegInfinity}

func typeCases() []typeCase {
	minIv := pipeline.Interval{Months: -178956970*12 - 8, Days: math.MinInt32, Micros: math.MinInt64}
	return []typeCase{
		{"int2", "-32768", int64(-32768)},
		{"int4", "2147483647", int64(2147483647)},
		{"int8", "-9223372036854775808", int64(math.MinInt64)},
		{"numeric", "123456789012345678901234567890.000000000000000000001", dec("123456789012345678901234567890.000000000000000000001")},
		{"numeric(10,2)", "3.1", dec("3.10")},
		{"numeric", "-0.0000001", dec("-0.0000001")},
		{"numeric", "1e-20", dec("0.00000000000000000001")},
		{"numeric", "'NaN'", pipeline.Decimal{Special: pipeline.NaN}},
		{"numeric", "'Infinity'", pipeline.Decimal{Special: pipeline.PosInfinity}},
		{"numeric", "'-Infinity'", pipeline.Decimal{Special: pipeline.NegInfinity}},
		{"float8", "'NaN'", math.NaN()},
		{"float8", "'Infinity'", math.Inf(1)},
		{"float8", "'-Infinity'", math.Inf(-1)},
		{"float8", "'-0'", math.Copysign(0, -1)},
		{"float8", "0.1", 0.1},
		{"float8", "1.7976931348623157e308", math.MaxFloat64},
		{"float8", "5e-324", 5e-324},
		{"float4", "0.1", float64(float32(0.1))},
		{"float4", "3.4028235e38", float64(float32(math.MaxFloat32))},
		{"float4", "'-0'", math.Copysign(0, -1)},
		{"bool", "true", true},
		{"bool", "false", false},
		{"text", `E'h\u00e9llo "q" \\ ''s'''`, `héllo "q" \ 's'`},
		{"varchar(5)", "'ab'", "ab"},
		{"char(5)", "'ab'", "ab   "},
		{"name", "'nm'", "nm"},
		{"citext", "'MiXed'", "MiXed"},
		{"bytea", `'\x00ff10'`, []byte{0, 0xff, 0x10}},
		{"bytea", "''", []byte{}},
		{"uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", pipeline.UUID{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}},
		{"json", `'{"b": 1,  "a":[1,2]}'`, pipeline.JSON(`{"b": 1,  "a":[1,2]}`)},
		{"jsonb", `'{"b": 1,  "a":[1,2]}'`, pipeline.JSON(`{"a": [1, 2], "b": 1}`)},
		{"date", "'2024-02-29'", dateOf(2024, 2, 29)},
		{"date", "'infinity'", pipeline.Date{Special: pipeline.PosInfinity}},
		{"date", "'-infinity'", pipeline.Date{Special: pipeline.NegInfinity}},
		{"date", "'0044-03-15 BC'", dateOf(-43, 3, 15)},
		{"date", "'4713-01-01 BC'", dateOf(-4712, 1, 1)},
		{"date", "'5874897-12-31'", dateOf(5874897, 12, 31)},
		{"time", "'24:00:00'", pipeline.TimeOfDay(86400e6)},
		{"time", "'13:45:01.123456'", pipeline.TimeOfDay(13*3600e6 + 45*60e6 + 1123456)},
		{"timetz", "'13:45:01.5+05:30'", pipeline.TimeTZ{Micros: 13*3600e6 + 45*60e6 + 1500000, OffsetSec: 19800}},
		{"timetz", "'00:00:00-08'", pipeline.TimeTZ{Micros: 0, OffsetSec: -8 * 3600}},
		{"timestamp", "'2024-01-02 03:04:05.123456'", tsOf(2024, 1, 2, 3, 4, 5, 123456)},
		{"timestamp", "'infinity'", posInfTS},
		{"timestamp", "'-infinity'", negInfTS},
		{"timestamp", "'0044-03-15 12:00:00 BC'", tsOf(-43, 3, 15, 12, 0, 0, 0)},
		{"timestamp", "'200000-06-01 00:00:00.000001'", tsOf(200000, 6, 1, 0, 0, 0, 1)},
		{"timestamptz", "'2024-01-02 03:04:05.123456+02'", tsOf(2024, 1, 2, 1, 4, 5, 123456)},
		{"timestamptz", "'infinity'", posInfTS},
		{"timestamptz", "'-infinity'", negInfTS},
		{"timestamptz", "'0044-03-15 12:00:00+00 BC'", tsOf(-43, 3, 15, 12, 0, 0, 0)},
		{"interval", "'1 year 2 mons 3 days 04:05:06.789'", pipeline.Interval{Months: 14, Days: 3, Micros: 4*3600e6 + 5*60e6 + 6789000}},
		{"interval", "'-1 year -2 mons +3 days -04:05:06'", pipeline.Interval{Months: -14, Days: 3, Micros: -(4*3600e6 + 5*60e6 + 6e6)}},
		{"interval", "'1 mon -1 days'", pipeline.Interval{Months: 1, Days: -1}},
		{"interval", "'-0.000001 seconds'", pipeline.Interval{Micros: -1}},
		{"interval", "'0'", pipeline.Interval{}},
		{"interval", "'-178956970 years -8 mons -2147483648 days -2562047788:00:54.775807'::interval - '0.000001 seconds'::interval", minIv},
		{"inet", "'192.168.0.1/24'", "192.168.0.1/24"},
		{"inet", "'::1'", "::1"},
		{"cidr", "'10.0.0.0/8'", "10.0.0.0/8"},
		{"macaddr", "'08:00:2B:01:02:03'", "08:00:2b:01:02:03"},
		{"macaddr8", "'08:00:2b:01:02:03:04:05'", "08:00:2b:01:02:03:04:05"},
		{"int4[]", "'{1,NULL,3}'", []any{int64(1), nil, int64(3)}},
		{"text[]", `ARRAY['a,b', 'c"d', 'NULL', NULL, '', ' sp ', 'back\slash', '{}']`, []any{"a,b", `c"d`, "NULL", nil, "", " sp ", `back\slash`, "{}"}},
		{"int4[]", "'{{1,2},{3,NULL}}'", []any{[]any{int64(1), int64(2)}, []any{int64(3), nil}}},
		{"int4[]", "'{}'", []any{}},
		{"int4[]", "'[0:1]={5,6}'", []any{int64(5), int64(6)}},
		{"numeric[]", "'{1.50,NaN,-Infinity}'", []any{dec("1.50"), pipeline.Decimal{Special: pipeline.NaN}, pipeline.Decimal{Special: pipeline.NegInfinity}}},
		{"timestamptz[]", "'{\"2020-01-01 00:00:00+01\",infinity}'", []any{tsOf(2019, 12, 31, 23, 0, 0, 0), posInfTS}},
		{"date[]", "'{infinity,2020-01-01}'", []any{pipeline.Date{Special: pipeline.PosInfinity}, dateOf(2020, 1, 1)}},
		{"bytea[]", `ARRAY['\x00ff'::bytea, NULL]`, []any{[]byte{0, 0xff}, nil}},
		{"bool[]", "'{t,f}'", []any{true, false}},
		{"jsonb[]", `ARRAY['{"a": 1}'::jsonb]`, []any{pipeline.JSON(`{"a": 1}`)}},
		{"box[]", "'{(1,1),(0,0);(2,2),(1,1)}'", []any{"(1,1),(0,0)", "(2,2),(1,1)"}},
		{"float8[]", "'{NaN,-0}'", []any{math.NaN(), math.Copysign(0, -1)}},
		{"text[]", "'{{a,b},{c,d}}'", []any{[]any{"a", "b"}, []any{"c", "d"}}},
		{"mood", "'ok'", "ok"},
		{"mood[]", "'{sad,NULL,happy}'", []any{"sad", nil, "happy"}},
		{"posint", "5", int64(5)},
		{"money2", "1.5", dec("1.50")},
		{"posint[]", "'{1,2}'", []any{int64(1), int64(2)}},
		{"point", "'(1,2)'", "(1,2)"},
		{"int4range", "'[1,5)'", "[1,5)"},
		{"int4", "NULL", nil},
	}
}

const typeSetup = `CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN money2 AS numeric(10,2);
CREATE EXTENSION citext`

// TestDecodeTextRoundTrip writes one row with every case through the
// server and checks that (1) the streamed value equals the expected value
// exactly, (2) the same row read back in text format, and in the chunk
// reader's formats (binary for numbers, dates, timestamps, uuids and
// bytea), decodes to the same value, and (3) where pgx's binary decoding
// gives an unambiguous value, it agrees too.
func TestDecodeTextRoundTrip(t *testing.T) {
	pg := harness.PostgresT(t)
	cases := typeCases()
	var cols, lits []string
	for i, c := range cases {
		cols = append(cols, fmt.Sprintf("c%d %s", i, c.typ))
		lits = append(lits, c.lit)
	}
	env := newReplEnv(t, pg, "types", nil, typeSetup,
		"CREATE TABLE tv (id int PRIMARY KEY, "+strings.Join(cols, ", ")+")")
	env.exec("INSERT INTO tv VALUES (1, " + strings.Join(lits, ", ") + ")")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	d := newTestDecoder(t, env, DecoderOptions{})
	recs := records(env.collect(ctx, d, 1))
	if len(recs) != 1 || recs[0].Op != pipeline.OpInsert {
		t.Fatalf("want one insert, got %+v", recs)
	}
	after := recs[0].After[1:]
	for i, c := range cases {
		if !sameValue(after[i], c.want) {
			t.Errorf("stream %s %s: got %s, want %s", c.typ, c.lit, fmtValue(after[i]), fmtValue(c.want))
		}
	}

	// The snapshot path: the same row in text format decodes identically.
	q := env.connect(ctx)
	shape, err := LoadTableShape(ctx, q, env.db, TableRef{Schema: "public", Name: "tv"})
	if err != nil {
		t.Fatal(err)
	}
	rr := q.PgConn().ExecParams(ctx, "SELECT * FROM tv", nil, nil, nil, []int16{pgx.TextFormatCode}).Read()
	if rr.Err != nil || len(rr.Rows) != 1 {
		t.Fatalf("snapshot read: %v (%d rows)", rr.Err, len(rr.Rows))
	}
	for i, c := range cases {
		raw := rr.Rows[0][i+1]
		var v any
		if raw != nil {
			if v, err = DecodeText(shape.Columns[i+1], raw); err != nil {
				t.Errorf("snapshot %s: %v", c.typ, err)
				continue
			}
		}
		if !sameValue(v, after[i]) {
			t.Errorf("snapshot %s %s: got %s, stream had %s", c.typ, c.lit, fmtValue(v), fmtValue(after[i]))
		}
	}

	// The chunk reader's formats: binary for the types it reads so, the
	// same values.
	formats := make([]int16, len(shape.Columns))
	binaryCols := 0
	for i := range shape.Columns {
		if binaryReadable(&shape.Columns[i]) {
			formats[i] = pgx.BinaryFormatCode
			binaryCols++
		}
	}
	rb := q.PgConn().ExecParams(ctx, "SELECT * FROM tv", nil, nil, nil, formats).Read()
	if rb.Err != nil || len(rb.Rows) != 1 {
		t.Fatalf("binary read: %v (%d rows)", rb.Err, len(rb.Rows))
	}
	for i, c := range cases {
		raw := rb.Rows[0][i+1]
		var v any
		if raw != nil {
			if v, err = decodeChunkValue(shape.Columns[i+1], formats[i+1], raw); err != nil {
				t.Errorf("chunk read %s: %v", c.typ, err)
				continue
			}
		}
		if !sameValue(v, after[i]) {
			t.Errorf("chunk read %s %s (format %d): got %s, stream had %s", c.typ, c.lit, formats[i+1], fmtValue(v), fmtValue(after[i]))
		}
	}
	if binaryCols < 30 {
		t.Errorf("only %d columns read in binary", binaryCols)
	}

	// Shapes: the stream's table (enriched by nothing) and the catalog
	// agree on the record-model types.
	streamTable := recs[0].Table
	for i, col := range shape.Table.Columns {
		sc := streamTable.Columns[i]
		if sc.Name != col.Name || sc.Type != col.Type || sc.Elem != col.Elem || sc.Precision != col.Precision || sc.Scale != col.Scale {
			t.Errorf("column %d: stream %+v, catalog %+v", i, sc, col)
		}
	}

	// Independent oracle: pgx's binary decoding.
	rows, err := q.Query(ctx, "SELECT * FROM tv")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatal("no row")
	}
	vals, err := rows.Values()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for i, c := range cases {
		v := vals[i+1]
		if tm, ok := v.(time.Time); ok {
			switch shape.Table.Columns[i+1].Type {
			case pipeline.TypeDate:
				v = pipeline.DateOf(tm)
			case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
				v = pipeline.TimestampOf(tm)
			}
		} else if o, ok := binaryOracle(v); ok {
			v = o
		} else {
			continue
		}
		checked++
		if !sameValue(v, after[i]) {
			t.Errorf("binary %s %s: pgx %s, stream %s", c.typ, c.lit, fmtValue(v), fmtValue(after[i]))
		}
	}
	if checked < 30 {
		t.Errorf("binary oracle covered only %d columns", checked)
	}
	rows.Close()

	// Column metadata of a few interesting cases.
	for i, c := range cases {
		col := streamTable.Columns[i+1]
		switch c.typ {
		case "numeric(10,2)", "money2":
			if col.Type != pipeline.TypeDecimal || col.Precision != 10 || col.Scale != 2 {
				t.Errorf("%s: %+v", c.typ, col)
			}
		case "numeric":
			if col.Scale != -1 || col.Precision != 0 {
				t.Errorf("%s: %+v", c.typ, col)
			}
		case "mood":
			if col.Type != pipeline.TypeEnum || strings.Join(col.Enum, ",") != "sad,ok,happy" {
				t.Errorf("%s: %+v", c.typ, col)
			}
		case "mood[]":
			if col.Type != pipeline.TypeArray || col.Elem != pipeline.TypeEnum {
				t.Errorf("%s: %+v", c.typ, col)
			}
		case "posint":
			if col.Type != pipeline.TypeInt32 {
				t.Errorf("%s: %+v", c.typ, col)
			}
		case "point":
			if col.Type != pipeline.TypeText {
				t.Errorf("%s: %+v", c.typ, col)
			}
		case "varchar(5)":
			if col.Type != pipeline.TypeString || col.Precision != 5 {
				t.Errorf("%s: %+v", c.typ, col)
			}
		}
	}
}

// TestDecodeTextDirect covers forms and errors without a server.
func TestDecodeTextDirect(t *testing.T) {
	good := []struct {
		oid  uint32
		text string
		want any
	}{
		{pgtype.BoolOID, "t", true},
		{pgtype.ByteaOID, `a\\b\001`, []byte{'a', '\\', 'b', 1}},
		{pgtype.TimestamptzOID, "2024-01-02 03:04:05-07:30:15", tsOf(2024, 1, 2, 10, 34, 20, 0)},
		{pgtype.IntervalOID, "-2562047788:00:54.775808", pipeline.Interval{Micros: math.MinInt64}},
		{pgtype.IntervalOID, "2562047788:00:54.775807", pipeline.Interval{Micros: math.MaxInt64}},
		{pgtype.IntervalOID, "1 day", pipeline.Interval{Days: 1}},
		{pgtype.Int4ArrayOID, ` { 1 , 2 } `, []any{int64(1), int64(2)}},
		{pgtype.TextArrayOID, `{\NULL,"\\",a\ b}`, []any{"NULL", `\`, "a b"}},
		{pgtype.TextArrayOID, `{"",null}`, []any{"", nil}},
	}
	for _, g := range good {
		v, err := DecodeText(builtinCol(t, g.oid), []byte(g.text))
		if err != nil || !sameValue(v, g.want) {
			t.Errorf("%d %q: got %s, %v; want %s", g.oid, g.text, fmtValue(v), err, fmtValue(g.want))
		}
	}
	bad := []struct {
		oid  uint32
		text string
	}{
		{pgtype.TimestampOID, "294270-01-01 00:00:00"}, // beyond int64 microseconds since 1970
		{pgtype.TimestamptzOID, "2024-01-02 03:04:05"}, // offset missing
		{pgtype.NumericOID, "1e5"},
		{pgtype.NumericOID, "12a"},
		{pgtype.IntervalOID, "2562047788:00:54.775808"},
		{pgtype.IntervalOID, "3 fortnights"},
		{pgtype.DateOID, "2024-13-01"},
		{pgtype.Int4ArrayOID, "{1,2"},
		{pgtype.Int4ArrayOID, "{1,{2}}x"},
		{pgtype.Int4ArrayOID, "{{{{{{{1}}}}}}}"},
		{pgtype.TextArrayOID, `{"a}`},
		{pgtype.BoolOID, "yes"},
		{pgtype.UUIDOID, "abc"},
	}
	for _, b := range bad {
		if v, err := DecodeText(builtinCol(t, b.oid), []byte(b.text)); err == nil {
			t.Errorf("%d %q: want error, got %s", b.oid, b.text, fmtValue(v))
		}
	}
}

// DecodeText's values and errors keep nothing of the buffer they were
// decoded from (numbers and bools are parsed from a view of it): the
// buffer is overwritten after each decode, as a COPY line or a chunk's
// row buffer is.
func TestDecodeTextKeepsNothingOfItsBuffer(t *testing.T) {
	for _, c := range []struct {
		oid  uint32
		text string
	}{
		{pgtype.Int8OID, "9007199254740993"}, {pgtype.NumericOID, "123456789012345678901234.5678"},
		{pgtype.NumericOID, "-12.50"}, {pgtype.Float8OID, "1.5e300"}, {pgtype.BoolOID, "f"},
		{pgtype.TextOID, "a label"}, {pgtype.JSONBOID, `{"a": 1}`}, {pgtype.Int8OID, "12x"},
		{pgtype.NumericOID, "12a"}, {pgtype.TextArrayOID, `{a,b}`},
	} {
		col := builtinCol(t, c.oid)
		want, wantErr := DecodeText(col, []byte(c.text))
		wantText := fmtValue(want)
		if wantErr != nil {
			wantText = wantErr.Error()
		}
		buf := []byte(c.text)
		got, err := DecodeText(col, buf)
		for i := range buf {
			buf[i] = '#'
		}
		gotText := fmtValue(got)
		if err != nil {
			gotText = err.Error()
		}
		if gotText != wantText {
			t.Errorf("%d %q: after its buffer was overwritten the value reads %s, want %s", c.oid, c.text, gotText, wantText)
		}
	}
}

// FuzzDecodeText feeds arbitrary text to every decoder, arrays included:
// errors are fine, panics are not.
func FuzzDecodeText(f *testing.F) {
	oids := []uint32{pgtype.Int4OID, pgtype.NumericOID, pgtype.Float8OID, pgtype.BoolOID, pgtype.ByteaOID,
		pgtype.UUIDOID, pgtype.DateOID, pgtype.TimeOID, pgtype.TimetzOID, pgtype.TimestampOID,
		pgtype.TimestamptzOID, pgtype.IntervalOID, pgtype.Int4ArrayOID, pgtype.TextArrayOID,
		pgtype.TimestamptzArrayOID, pgtype.IntervalArrayOID, pgtype.BoxArrayOID, pgtype.NumericArrayOID}
	for _, c := range typeCases() {
		f.Add(strings.Trim(c.lit, "'"))
	}
	f.Add(`{{"a\"",NULL},{\{,""}}`)
	f.Add("[1:2][3:4]={{1,2},{3,4}}")
	f.Add("-2562047788:00:54.775808")
	f.Add("99999999999999-12-31 23:59:59.999999+15:59:59 BC")
	f.Fuzz(func(t *testing.T, s string) {
		for _, oid := range oids {
			info, _ := builtinTypeInfo(oid)
			_, _ = DecodeText(ColumnInfo{Name: "f", OID: oid, TypMod: -1, Type: info}, []byte(s))
		}
		_, _ = parseArrayText(s, ',', func(e string) (any, error) { return e, nil })
	})
}

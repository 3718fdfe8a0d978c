package postgres

import (
	"math"
	"math/big"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// TestTypesRoundTrip writes every pipeline.Type (and arrays of them) and
// reads it back unchanged, across a restart.
func TestTypesRoundTrip(t *testing.T) {
	cols := []pipeline.Column{
		{Name: "k", Type: pipeline.TypeUUID, Key: true},
		{Name: "txt", Type: pipeline.TypeText},
		{Name: "b", Type: pipeline.TypeBool},
		{Name: "i16", Type: pipeline.TypeInt16},
		{Name: "i32", Type: pipeline.TypeInt32},
		{Name: "i64", Type: pipeline.TypeInt64},
		{Name: "u8", Type: pipeline.TypeUint8},
		{Name: "u16", Type: pipeline.TypeUint16},
		{Name: "u32", Type: pipeline.TypeUint32},
		{Name: "u64", Type: pipeline.TypeUint64},
		{Name: "f32", Type: pipeline.TypeFloat32},
		{Name: "f64", Type: pipeline.TypeFloat64},
		{Name: "d38", Type: pipeline.TypeDecimal, Precision: 38, Scale: 10},
		{Name: "dbig", Type: pipeline.TypeDecimal, Precision: 60, Scale: 20},
		{Name: "dfree", Type: pipeline.TypeDecimal, Scale: -1},
		{Name: "s", Type: pipeline.TypeString, Precision: 40},
		{Name: "blob", Type: pipeline.TypeBytes},
		{Name: "u", Type: pipeline.TypeUUID},
		{Name: "j", Type: pipeline.TypeJSON},
		{Name: "d", Type: pipeline.TypeDate},
		{Name: "tod", Type: pipeline.TypeTime},
		{Name: "ttz", Type: pipeline.TypeTimeTZ},
		{Name: "ts", Type: pipeline.TypeTimestamp},
		{Name: "tstz", Type: pipeline.TypeTimestampTZ},
		{Name: "iv", Type: pipeline.TypeInterval},
		{Name: "inet", Type: pipeline.TypeInet},
		{Name: "mac", Type: pipeline.TypeMacaddr},
		{Name: "mood", Type: pipeline.TypeEnum, Enum: []string{"ok", "sad"}},
		{Name: "flags", Type: pipeline.TypeSet, Enum: []string{"a", "b"}},
		{Name: "bits", Type: pipeline.TypeBit},
		{Name: "geo", Type: pipeline.TypeGeometry},
		{Name: "ints", Type: pipeline.TypeArray, Elem: pipeline.TypeInt32},
		{Name: "decs", Type: pipeline.TypeArray, Elem: pipeline.TypeDecimal, Precision: 5, Scale: 2},
		{Name: "days", Type: pipeline.TypeArray, Elem: pipeline.TypeDate},
		{Name: "stamps", Type: pipeline.TypeArray, Elem: pipeline.TypeTimestampTZ},
		{Name: "strs", Type: pipeline.TypeArray, Elem: pipeline.TypeString},
		{Name: "grid", Type: pipeline.TypeArray, Elem: pipeline.TypeInt64},
		{Name: "blobs", Type: pipeline.TypeArray, Elem: pipeline.TypeBytes},
		{Name: "docs", Type: pipeline.TypeArray, Elem: pipeline.TypeJSON},
		{Name: "uids", Type: pipeline.TypeArray, Elem: pipeline.TypeUUID},
		{Name: "u64s", Type: pipeline.TypeArray, Elem: pipeline.TypeUint64},
		{Name: "floats", Type: pipeline.TypeArray, Elem: pipeline.TypeFloat64},
		{Name: "spans", Type: pipeline.TypeArray, Elem: pipeline.TypeInterval},
		{Name: "ttzs", Type: pipeline.TypeArray, Elem: pipeline.TypeTimeTZ},
		{Name: "bools", Type: pipeline.TypeArray, Elem: pipeline.TypeBool},
	}
	table := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "all_types"}, Columns: cols, KeyIdx: []int{0}}
	big38, _ := new(big.Int).SetString("1234567890123456789012345678", 10)
	rowA := []any{pipeline.UUID{0xde, 0xad, 0xbe, 0xef, 15: 1}, "some text", true,
		int64(-32768), int64(math.MaxInt32), int64(math.MinInt64),
		uint64(255), uint64(65535), uint64(math.MaxUint32), uint64(math.MaxUint64), float64(float32(1.25)), math.Inf(-1),
		pipeline.Decimal{Unscaled: big38, Scale: 10},
		dec("-1234567890123456789012345678901234567890.12345678901234567890"),
		dec("1.50000000000000000000000000000000000000000000001"),
		"héllo \"quoted\" \\ {x,y}", []byte{0, 1, 0xff}, pipeline.UUID{1, 2, 3},
		pipeline.JSON(`{"a": [1, 2.5, null], "b": "x"}`),
		pipeline.Date{Days: -719528}, pipeline.TimeOfDay(86400_000_000),
		pipeline.TimeTZ{Micros: 45296_789012, OffsetSec: -(3*3600 + 30*60)},
		pipeline.Timestamp{Micros: -62135596800_000_000}, pipeline.Timestamp{Micros: 1700000000_123456},
		pipeline.Interval{Months: -14, Days: -3, Micros: -4_000_005}, "10.0.0.0/8", "08:00:2b:01:02:03", "sad", "a,b",
		[]byte{0xa5}, []byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		[]any{int64(1), nil, int64(-3)}, []any{dec("1.5"), nil},
		[]any{pipeline.Date{Special: pipeline.PosInfinity}, pipeline.Date{Days: 1}, pipeline.Date{Days: -800000}},
		[]any{pipeline.Timestamp{Special: pipeline.NegInfinity}, pipeline.Timestamp{Micros: 1}},
		[]any{"a", nil, "NULL", `q"uo\te`, "", " sp ", "{}", "x,y"},
		[]any{[]any{int64(1), int64(2)}, []any{nil, int64(4)}},
		[]any{[]byte{0, 0xff}, nil, []byte{}},
		[]any{pipeline.JSON(`{"k": "v \"q\""}`), pipeline.JSON(`[1]`)},
		[]any{pipeline.UUID{9}},
		[]any{uint64(math.MaxUint64), uint64(0)},
		[]any{math.NaN(), math.Inf(1), -0.5, 1e300},
		[]any{pipeline.Interval{Months: 1, Days: 2, Micros: 3}, pipeline.Interval{Micros: math.MinInt64 + 1}},
		[]any{pipeline.TimeTZ{Micros: 0, OffsetSec: 15*3600 + 59*60 + 59}},
		[]any{true, false, nil},
	}
	rowB := make([]any, len(cols))
	rowB[0] = pipeline.UUID{1}
	rowB[14] = pipeline.Decimal{Special: pipeline.NaN}
	rowB[12] = pipeline.Decimal{Special: pipeline.NaN} // numeric(p,s) holds NaN
	rowB[11] = math.NaN()
	rowB[19] = pipeline.Date{Special: pipeline.NegInfinity}
	rowB[22] = pipeline.Timestamp{Special: pipeline.PosInfinity}
	rowB[23] = pipeline.Timestamp{Special: pipeline.NegInfinity}
	rowB[31] = []any{}
	rowC := make([]any, len(cols))
	rowC[0] = pipeline.UUID{2}
	rowC[14] = pipeline.Decimal{Special: pipeline.PosInfinity}
	rowC[19] = pipeline.Date{Days: maxDateDays}
	rowC[22] = pipeline.Timestamp{Micros: 9_000_000_000_000_000_000} // year 287,000
	rowC[23] = pipeline.Timestamp{Micros: minTimestamp}
	rowC[24] = pipeline.Interval{Months: math.MaxInt32, Days: math.MinInt32, Micros: math.MaxInt64}
	rowC[20] = pipeline.TimeOfDay(0)
	schema := freshSchema()
	s := openSink(t, Options{Schema: schema})
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpInsert, Table: table, After: rowA, Version: ver(1)},
		pipeline.Record{Op: pipeline.OpRead, Table: table, After: rowB, Version: ver(1)},
		pipeline.Record{Op: pipeline.OpRead, Table: table, After: rowC, Version: ver(1)})
	s.Close(ctx)
	s = openSink(t, Options{Schema: schema}) // restart keeps state
	expectRows(t, s, table, rowA, rowB, rowC)
	types := columnTypes(t, s, "s_all_types")
	for col, want := range map[string]string{"k": "uuid", "txt": "text", "b": "boolean", "i16": "smallint", "i32": "integer",
		"i64": "bigint", "u8": "smallint", "u16": "integer", "u32": "bigint", "u64": "numeric(20,0)", "f32": "real",
		"f64": "double precision", "d38": "numeric(38,10)", "dbig": "numeric(60,20)", "dfree": "numeric", "s": "text",
		"blob": "bytea", "j": "jsonb", "d": "date", "tod": "time without time zone", "ttz": "time with time zone",
		"ts": "timestamp without time zone", "tstz": "timestamp with time zone", "iv": "interval", "inet": "text",
		"mood": "text", "flags": "text", "bits": "bytea", "geo": "bytea", "ints": "integer[]", "decs": "numeric(5,2)[]",
		"stamps": "timestamp with time zone[]", "grid": "bigint[]", "docs": "jsonb[]", "u64s": "numeric(20,0)[]",
		"ttzs": "time with time zone[]"} {
		if types[col] != want {
			t.Errorf("column %s: type %q, want %q", col, types[col], want)
		}
	}
	got := rows(t, s, table)[sinktest.RowKey(table, rowA)]
	if got[12].(pipeline.Decimal).Scale != 10 || got[13].(pipeline.Decimal).String() != rowA[13].(pipeline.Decimal).String() {
		t.Fatalf("decimals lost their exact form: %v %v", got[12], got[13])
	}
}

// TestValueTextForms checks the text input forms of the types staged as
// text against what the server parses them to.
func TestValueTextForms(t *testing.T) {
	s := openSink(t, Options{})
	cases := []struct {
		typ  pipeline.Type
		v    any
		cast string
		want string
	}{
		{pipeline.TypeDate, pipeline.Date{Days: -719528 - 1}, "date", "0002-12-31 BC"},
		{pipeline.TypeDate, pipeline.Date{Days: minDateDays}, "date", "4714-11-24 BC"},
		{pipeline.TypeTimestamp, pipeline.Timestamp{Micros: -62135596800_000_001}, "timestamp", "0001-12-31 23:59:59.999999 BC"},
		{pipeline.TypeTimestampTZ, pipeline.Timestamp{Micros: 1}, "timestamptz", "1970-01-01 00:00:00.000001+00"},
		{pipeline.TypeTimeTZ, pipeline.TimeTZ{Micros: 3_600_000_000, OffsetSec: 5*3600 + 30*60 + 15}, "timetz", "01:00:00+05:30:15"},
		{pipeline.TypeInterval, pipeline.Interval{Micros: -1}, "interval", "-00:00:00.000001"},
	}
	for _, c := range cases {
		col := &pipeline.Column{Name: "x", Type: c.typ}
		text, err := toStage(col, c.v)
		if err != nil {
			t.Fatalf("%v: %v", c.v, err)
		}
		var got string
		if err := s.conn.QueryRow(ctx, "SELECT $1::text::"+c.cast+"::text", text).Scan(&got); err != nil {
			t.Fatalf("%v (%q): %v", c.v, text, err)
		}
		if got != c.want {
			t.Errorf("%v: %q reads as %q, want %q", c.v, text, got, c.want)
		}
	}
	for _, bad := range []struct {
		typ pipeline.Type
		v   any
	}{
		{pipeline.TypeDate, pipeline.Date{Days: minDateDays - 1}},
		{pipeline.TypeDate, pipeline.Date{Days: maxDateDays + 1}},
		{pipeline.TypeTimestamp, pipeline.Timestamp{Micros: minTimestamp - 1}},
		{pipeline.TypeTime, pipeline.TimeOfDay(86400_000_001)},
		{pipeline.TypeTimeTZ, pipeline.TimeTZ{OffsetSec: 16 * 3600}},
		{pipeline.TypeInt16, int64(40000)},
		{pipeline.TypeUint8, uint64(256)},
		{pipeline.TypeString, 12},
	} {
		if x, err := toStage(&pipeline.Column{Name: "x", Type: bad.typ}, bad.v); err == nil {
			t.Errorf("%s %v: staged as %v, want an error", bad.typ, bad.v, x)
		}
	}
}

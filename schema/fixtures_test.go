package schema

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

func dec(s string) pipeline.Decimal {
	d, err := pipeline.ParseDecimal(s)
	if err != nil {
		panic(err)
	}
	return d
}

func uuidOf(s string) pipeline.UUID {
	v, err := fromNative(nil, pipeline.TypeUUID, s)
	if err != nil {
		panic(err)
	}
	return v.(pipeline.UUID)
}

func ts(s string) pipeline.Timestamp {
	t, err := time.Parse("2006-01-02 15:04:05.999999", s)
	if err != nil {
		panic(err)
	}
	return pipeline.TimestampOf(t)
}

func date(s string) pipeline.Date {
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		panic(err)
	}
	return pipeline.DateOf(t)
}

// typeCase is one column with the values a round trip must preserve.
type typeCase struct {
	col    pipeline.Column
	values []any
}

// allTypeCases covers every pipeline.Type, with edge values.
func allTypeCases() []typeCase {
	return []typeCase{
		{pipeline.Column{Name: "c_text", Type: pipeline.TypeText, SourceType: "tsvector"}, []any{"'a':1", ""}},
		{pipeline.Column{Name: "c_bool", Type: pipeline.TypeBool}, []any{true, false}},
		{pipeline.Column{Name: "c_int16", Type: pipeline.TypeInt16}, []any{int64(math.MinInt16), int64(math.MaxInt16), int64(-1)}},
		{pipeline.Column{Name: "c_int32", Type: pipeline.TypeInt32}, []any{int64(math.MinInt32), int64(math.MaxInt32)}},
		{pipeline.Column{Name: "c_int64", Type: pipeline.TypeInt64}, []any{int64(math.MinInt64), int64(math.MaxInt64)}},
		{pipeline.Column{Name: "c_uint8", Type: pipeline.TypeUint8}, []any{uint64(0), uint64(math.MaxUint8)}},
		{pipeline.Column{Name: "c_uint16", Type: pipeline.TypeUint16}, []any{uint64(math.MaxUint16), uint64(7)}},
		{pipeline.Column{Name: "c_uint32", Type: pipeline.TypeUint32}, []any{uint64(math.MaxUint32), uint64(0)}},
		{pipeline.Column{Name: "c_uint64", Type: pipeline.TypeUint64}, []any{uint64(math.MaxUint64), uint64(0), uint64(1 << 63)}},
		{pipeline.Column{Name: "c_float32", Type: pipeline.TypeFloat32}, []any{float64(float32(3.25)), float64(float32(-1e-20)), math.Inf(1)}},
		{pipeline.Column{Name: "c_float64", Type: pipeline.TypeFloat64}, []any{math.Pi, math.Copysign(0, -1), math.MaxFloat64, math.Inf(-1)}},
		{pipeline.Column{Name: "c_decimal", Type: pipeline.TypeDecimal, Precision: 38, Scale: 10, SourceType: "numeric(38,10)"},
			[]any{dec("1234567890123456789012345678.0123456789"), dec("-0.0000000001"), dec("-99.5"), dec("0"), dec("1e3")}},
		{pipeline.Column{Name: "c_decimal0", Type: pipeline.TypeDecimal, Precision: 20, Scale: 0}, []any{dec("-12345678901234567890"), dec("128"), dec("-128")}},
		{pipeline.Column{Name: "c_numeric", Type: pipeline.TypeDecimal, Precision: 0, Scale: -1, SourceType: "numeric"},
			[]any{dec("3.14159265358979323846264338327950288419716939937510"), dec("-128"), dec("-129"), dec("255"), dec("0.000"), dec("-1e-30"), dec("1e40")}},
		{pipeline.Column{Name: "c_string", Type: pipeline.TypeString, SourceType: "character varying(40)"}, []any{"héllo, wörld ✓", ""}},
		{pipeline.Column{Name: "c_bytes", Type: pipeline.TypeBytes}, []any{[]byte{0, 1, 0xff}, []byte{}}},
		{pipeline.Column{Name: "c_uuid", Type: pipeline.TypeUUID}, []any{uuidOf("123e4567-e89b-12d3-a456-426614174000"), pipeline.UUID{}}},
		{pipeline.Column{Name: "c_json", Type: pipeline.TypeJSON}, []any{pipeline.JSON(`{"a":[1,2,{"b":null}]}`), pipeline.JSON(`"x"`)}},
		{pipeline.Column{Name: "c_date", Type: pipeline.TypeDate}, []any{date("1969-12-31"), date("1066-10-14"), date("2024-02-29"),
			pipeline.Date{Special: pipeline.PosInfinity}, pipeline.Date{Special: pipeline.NegInfinity}}},
		{pipeline.Column{Name: "c_time", Type: pipeline.TypeTime}, []any{pipeline.TimeOfDay(0), pipeline.TimeOfDay(86399999999), pipeline.TimeOfDay(86400e6), pipeline.TimeOfDay(45296789012)}},
		{pipeline.Column{Name: "c_timetz", Type: pipeline.TypeTimeTZ}, []any{pipeline.TimeTZ{Micros: 45296789012, OffsetSec: 19800},
			pipeline.TimeTZ{Micros: 1, OffsetSec: -(3*3600 + 30*60 + 15)}, pipeline.TimeTZ{}}},
		{pipeline.Column{Name: "c_timestamp", Type: pipeline.TypeTimestamp}, []any{ts("2024-05-06 07:08:09.123456"), ts("1900-01-01 00:00:00.000001"),
			ts("1969-12-31 23:59:59.999999"), pipeline.Timestamp{Special: pipeline.PosInfinity}, pipeline.Timestamp{Special: pipeline.NegInfinity}}},
		{pipeline.Column{Name: "c_timestamptz", Type: pipeline.TypeTimestampTZ}, []any{ts("2024-05-06 07:08:09.000001"), ts("0001-01-02 03:04:05.5"),
			pipeline.Timestamp{Special: pipeline.PosInfinity}}},
		{pipeline.Column{Name: "c_interval", Type: pipeline.TypeInterval}, []any{pipeline.Interval{Months: 14, Days: -3, Micros: 3723000004}, pipeline.Interval{}}},
		{pipeline.Column{Name: "c_inet", Type: pipeline.TypeInet}, []any{"192.168.0.1/24", "::1"}},
		{pipeline.Column{Name: "c_macaddr", Type: pipeline.TypeMacaddr}, []any{"08:00:2b:01:02:03"}},
		{pipeline.Column{Name: "c_enum", Type: pipeline.TypeEnum, Enum: []string{"sad", "ok", "happy"}}, []any{"happy", "a label added later"}},
		{pipeline.Column{Name: "c_set", Type: pipeline.TypeSet, Enum: []string{"a", "b"}}, []any{"a,b", ""}},
		{pipeline.Column{Name: "c_bit", Type: pipeline.TypeBit}, []any{[]byte{0xa5}}},
		{pipeline.Column{Name: "c_geometry", Type: pipeline.TypeGeometry}, []any{[]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0x40}}},
		{pipeline.Column{Name: "c_int_array", Type: pipeline.TypeArray, Elem: pipeline.TypeInt32}, []any{[]any{int64(1), nil, int64(-3)}, []any{}}},
		{pipeline.Column{Name: "c_dec_array", Type: pipeline.TypeArray, Elem: pipeline.TypeDecimal, Precision: 0, Scale: -1},
			[]any{[]any{dec("1.5"), nil, dec("-2.25")}}},
		{pipeline.Column{Name: "c_ts_array", Type: pipeline.TypeArray, Elem: pipeline.TypeTimestampTZ},
			[]any{[]any{nil, ts("1950-06-07 08:09:10.111213")}}},
		{pipeline.Column{Name: "c_text_array", Type: pipeline.TypeArray, Elem: pipeline.TypeText}, []any{[]any{"a", nil, ""}}},
		{pipeline.Column{Name: "c_iv_array", Type: pipeline.TypeArray, Elem: pipeline.TypeInterval},
			[]any{[]any{pipeline.Interval{Months: 1}, nil}}},
	}
}

// allTypesTable builds a table with a key, then each case's column twice:
// NOT NULL (named as the case) and nullable (suffix _n).
func allTypesTable(cases []typeCase) *pipeline.Table {
	cols := []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true, SourceType: "bigint", Comment: "row id"}}
	for _, c := range cases {
		nn := c.col
		cols = append(cols, nn)
		n := c.col
		n.Name += "_n"
		n.Nullable = true
		cols = append(cols, n)
	}
	return &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "all_types"}, Columns: cols, KeyIdx: []int{0}}
}

// valueEqual compares pipeline values: decimals numerically, bytes by
// content, arrays element by element.
func valueEqual(a, b any) bool {
	switch x := a.(type) {
	case pipeline.Decimal:
		y, ok := b.(pipeline.Decimal)
		return ok && x.Equal(y)
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || (math.IsNaN(x) && math.IsNaN(y))) && math.Signbit(x) == math.Signbit(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !valueEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func show(v any) string {
	switch x := v.(type) {
	case pipeline.Decimal, pipeline.Timestamp, pipeline.Date, pipeline.UUID:
		return fmt.Sprintf("%T(%s)", x, x)
	}
	return fmt.Sprintf("%T(%#v)", v, v)
}

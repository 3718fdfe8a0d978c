package sinktest

import (
	"math"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// TypeCase is one type family of the record model with the values at its
// edges that every sink storing rows must give back exactly (or in the
// fallback form it documents).
type TypeCase struct {
	Name   string
	Column pipeline.Column // its Type, Elem, Precision, Scale, SourceType
	// Values are the edge values, at least two, none nil; the first is
	// also the missing value of a column added by the matrix's shape
	// change, and each value is written once as an update of another.
	Values []any
}

// days is the Date of a proleptic Gregorian day (year 0 is 1 BC).
func days(year int, month time.Month, day int) pipeline.Date {
	d := time.Date(year, month, day, 0, 0, 0, 0, time.UTC)
	return pipeline.Date{Days: int32(d.Unix() / 86400)}
}

// micros is the Timestamp of a proleptic Gregorian instant in UTC.
func micros(year int, month time.Month, day, h, m, s, us int) pipeline.Timestamp {
	t := time.Date(year, month, day, h, m, s, us*1000, time.UTC)
	return pipeline.Timestamp{Micros: t.Unix()*1_000_000 + int64(t.Nanosecond()/1000)}
}

func dec(s string) pipeline.Decimal {
	d, err := pipeline.ParseDecimal(s)
	if err != nil {
		panic("sinktest: " + err.Error())
	}
	return d
}

// awkward is text with every kind of character Postgres allows in text:
// quotes, backslashes, separators, control characters, combining marks,
// characters outside the BMP, and a right-to-left mark.
const awkward = "a'b\"c\\d,e;f{g}h[i]j\ttab\nnewline\rcr\x01\x1f del\x7f é e\u0301 ü 漢字 😀 \u200f rtl NULL null"

// TypeCases are the type families of the README's mapping table, each at
// its edges.
var TypeCases = []TypeCase{
	{"int16", pipeline.Column{Type: pipeline.TypeInt16, SourceType: "smallint"},
		[]any{int64(0), int64(math.MinInt16), int64(math.MaxInt16), int64(-1)}},
	{"int32", pipeline.Column{Type: pipeline.TypeInt32, SourceType: "integer"},
		[]any{int64(0), int64(math.MinInt32), int64(math.MaxInt32)}},
	{"int64", pipeline.Column{Type: pipeline.TypeInt64, SourceType: "bigint"},
		[]any{int64(0), int64(math.MinInt64), int64(math.MaxInt64), int64(1 << 53), int64(1<<53 + 1)}},
	// MySQL/MariaDB unsigned integers (TINYINT … INT UNSIGNED).
	{"uint8", pipeline.Column{Type: pipeline.TypeUint8, SourceType: "tinyint unsigned"},
		[]any{uint64(0), uint64(math.MaxUint8)}},
	{"uint16", pipeline.Column{Type: pipeline.TypeUint16, SourceType: "smallint unsigned"},
		[]any{uint64(0), uint64(math.MaxUint16)}},
	{"uint32", pipeline.Column{Type: pipeline.TypeUint32, SourceType: "int unsigned"},
		[]any{uint64(0), uint64(math.MaxUint32)}},
	{"uint64", pipeline.Column{Type: pipeline.TypeUint64, SourceType: "bigint unsigned"},
		[]any{uint64(0), uint64(math.MaxUint64), uint64(1<<63 + 1)}},
	{"float64", pipeline.Column{Type: pipeline.TypeFloat64, SourceType: "double precision"},
		[]any{0.0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), 5e-324, math.MaxFloat64,
			-math.SmallestNonzeroFloat64, 0.1, 1.0000000000000002}},
	{"float32", pipeline.Column{Type: pipeline.TypeFloat32, SourceType: "real"},
		[]any{0.0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), float64(math.MaxFloat32),
			float64(math.SmallestNonzeroFloat32), float64(float32(0.1))}},
	{"numeric(38,10)", pipeline.Column{Type: pipeline.TypeDecimal, Precision: 38, Scale: 10, SourceType: "numeric(38,10)"},
		[]any{dec("0.0000000000"), dec("9999999999999999999999999999.9999999999"), dec("-1.0000000000"),
			dec("0.0000000001"), dec("-9999999999999999999999999999.9999999999"),
			// A constrained numeric holds NaN but refuses ±Infinity.
			pipeline.Decimal{Special: pipeline.NaN}}},
	{"numeric", pipeline.Column{Type: pipeline.TypeDecimal, Scale: -1, SourceType: "numeric"},
		[]any{dec("0"), dec("123456789012345678901234567890123456789"), dec("1.10"),
			dec("-0.0000000000000000000000000000000000000001"), pipeline.Decimal{Special: pipeline.NaN}, pipeline.Decimal{Special: pipeline.PosInfinity},
			pipeline.Decimal{Special: pipeline.NegInfinity}}},
	{"bool", pipeline.Column{Type: pipeline.TypeBool, SourceType: "boolean"}, []any{true, false}},
	{"text", pipeline.Column{Type: pipeline.TypeString, SourceType: "text"},
		[]any{"", awkward, strings.Repeat("long ✓ ", 3000), " padded  ", "\\N"}},
	{"bytea", pipeline.Column{Type: pipeline.TypeBytes, SourceType: "bytea"},
		[]any{[]byte{}, allBytes(), []byte("\\x00")}},
	{"uuid", pipeline.Column{Type: pipeline.TypeUUID, SourceType: "uuid"},
		[]any{pipeline.UUID{}, pipeline.UUID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			pipeline.UUID{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}}},
	{"jsonb", pipeline.Column{Type: pipeline.TypeJSON, SourceType: "jsonb"},
		[]any{pipeline.JSON(`{}`), pipeline.JSON(`{"a": [1, 2.5, "x", null, true], "b": {"c": "é\"\\"}}`),
			pipeline.JSON(`[]`), pipeline.JSON(`"just a string"`), pipeline.JSON(`12345678901234567890.123456789`), pipeline.JSON(`null`),
			pipeline.JSON(`{"$sluice_json": null}`)}},
	{"date", pipeline.Column{Type: pipeline.TypeDate, SourceType: "date"},
		[]any{days(1970, 1, 1), days(-43, 3, 15), days(1, 1, 1), days(9999, 12, 31), days(2000, 2, 29),
			pipeline.Date{Special: pipeline.PosInfinity}, pipeline.Date{Special: pipeline.NegInfinity}}},
	{"time", pipeline.Column{Type: pipeline.TypeTime, SourceType: "time without time zone"},
		[]any{pipeline.TimeOfDay(0), pipeline.TimeOfDay(86_399_999_999), pipeline.TimeOfDay(86_400_000_000), pipeline.TimeOfDay(1)}},
	{"timetz", pipeline.Column{Type: pipeline.TypeTimeTZ, SourceType: "time with time zone"},
		[]any{pipeline.TimeTZ{}, pipeline.TimeTZ{Micros: 86_399_999_999, OffsetSec: 14 * 3600},
			pipeline.TimeTZ{Micros: 1, OffsetSec: -(15*3600 + 59*60)}, pipeline.TimeTZ{Micros: 12 * 3600e6, OffsetSec: 5*3600 + 30*60}}},
	{"timestamp", pipeline.Column{Type: pipeline.TypeTimestamp, SourceType: "timestamp without time zone"},
		[]any{micros(1970, 1, 1, 0, 0, 0, 0), micros(-43, 3, 15, 12, 0, 0, 1), micros(9999, 12, 31, 23, 59, 59, 999999),
			micros(2000, 2, 29, 0, 0, 0, 1), pipeline.Timestamp{Special: pipeline.PosInfinity}, pipeline.Timestamp{Special: pipeline.NegInfinity}}},
	{"timestamptz", pipeline.Column{Type: pipeline.TypeTimestampTZ, SourceType: "timestamp with time zone"},
		[]any{micros(1970, 1, 1, 0, 0, 0, 0), micros(-43, 3, 15, 12, 0, 0, 1), micros(9999, 12, 31, 23, 59, 59, 999999),
			micros(1969, 12, 31, 23, 59, 59, 999999), pipeline.Timestamp{Special: pipeline.PosInfinity}, pipeline.Timestamp{Special: pipeline.NegInfinity}}},
	{"interval", pipeline.Column{Type: pipeline.TypeInterval, SourceType: "interval"},
		[]any{pipeline.Interval{}, pipeline.Interval{Months: math.MaxInt32, Days: math.MaxInt32, Micros: math.MaxInt64},
			pipeline.Interval{Months: -math.MaxInt32, Days: -math.MaxInt32, Micros: -math.MaxInt64},
			pipeline.Interval{Months: 1, Days: -1, Micros: 1}}},
	{"inet", pipeline.Column{Type: pipeline.TypeInet, SourceType: "inet"},
		[]any{"0.0.0.0", "192.168.0.1/24", "::1", "2001:db8::/32", "::ffff:1.2.3.4"}},
	{"macaddr", pipeline.Column{Type: pipeline.TypeMacaddr, SourceType: "macaddr"},
		[]any{"00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff"}},
	{"enum", pipeline.Column{Type: pipeline.TypeEnum, Enum: []string{"", "a b", "ü", "NULL"}, SourceType: "mood"},
		[]any{"a b", "", "ü", "NULL"}},
	{"int32[]", pipeline.Column{Type: pipeline.TypeArray, Elem: pipeline.TypeInt32, SourceType: "integer[]"},
		[]any{[]any{}, []any{int64(1), nil, int64(3)}, []any{nil}, []any{int64(math.MinInt32), int64(math.MaxInt32)}}},
	{"int32[][]", pipeline.Column{Type: pipeline.TypeArray, Elem: pipeline.TypeInt32, SourceType: "integer[]"},
		[]any{[]any{[]any{int64(1), int64(2)}, []any{int64(3), nil}}, []any{[]any{int64(0)}}}},
	{"text[]", pipeline.Column{Type: pipeline.TypeArray, Elem: pipeline.TypeString, SourceType: "text[]"},
		[]any{[]any{"", awkward, nil, "NULL", "{}", "a,b"}, []any{}, []any{"x"}}},
	{"unknown text form", pipeline.Column{Type: pipeline.TypeText, SourceType: "int4range"},
		[]any{"[1,10)", "empty", "(,)"}},
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

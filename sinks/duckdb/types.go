package duckdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/sluice-cdc/sluice/pipeline"
)

// DuckDB's own encodings of ±infinity and the bounds of its finite range.
const (
	dateInf     = math.MaxInt32        // DATE 'infinity' as days since the epoch
	dateMax     = math.MaxInt32 - 1    // last finite date
	dateMin     = -(math.MaxInt32 - 1) // first finite date
	tsInf       = math.MaxInt64        // TIMESTAMP 'infinity' as micros since the epoch
	tsMax       = math.MaxInt64 - 1    // last finite timestamp
	tsMin       = -9223372022400000000 // first finite timestamp (290309-12-22 BC)
	dayMicros   = 86400_000_000
	maxTZOffset = 16*3600 - 1 // TIMETZ offsets are limited to ±15:59:59
)

// colType is how one pipeline column lives in DuckDB: its type in the
// target table, its type in the staging table the Appender fills, the SQL
// that turns a staged value into the target type, and the SQL that reads a
// target value back in a form fromRead understands.
type colType struct {
	ddl   string
	stage string
	conv  func(x string) string // nil: staged value already has the target type
	read  func(x string) string // nil: read the column as is
}

// errValue marks a value the target cannot hold; the record is failed
// permanently.
var errValue = errors.New("value not representable in duckdb")

func valueErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errValue, fmt.Sprintf(format, args...))
}

// typeOf maps a column to its DuckDB representation. The mapping is
// type-faithful: no value is kept as text when DuckDB has an exact type
// for it, and text is used only where DuckDB's type would lose data
// (decimals wider than 38 digits or unconstrained).
func typeOf(c *pipeline.Column) colType {
	if c.Type == pipeline.TypeArray {
		e := scalarType(c.Elem, c)
		t := colType{ddl: e.ddl + "[]", stage: e.stage + "[]"}
		if e.conv != nil {
			t.conv = func(x string) string { return "list_transform(" + x + ", lambda e: " + e.conv("e") + ")" }
		}
		if e.read != nil {
			t.read = func(x string) string { return "list_transform(" + x + ", lambda e: " + e.read("e") + ")" }
		}
		return t
	}
	return scalarType(c.Type, c)
}

func scalarType(t pipeline.Type, c *pipeline.Column) colType {
	same := func(ddl string) colType { return colType{ddl: ddl, stage: ddl} }
	switch t {
	case pipeline.TypeBool:
		return same("BOOLEAN")
	case pipeline.TypeInt16:
		return same("SMALLINT")
	case pipeline.TypeInt32:
		return same("INTEGER")
	case pipeline.TypeInt64:
		return same("BIGINT")
	case pipeline.TypeUint8:
		return same("UTINYINT")
	case pipeline.TypeUint16:
		return same("USMALLINT")
	case pipeline.TypeUint32:
		return same("UINTEGER")
	case pipeline.TypeUint64:
		return same("UBIGINT")
	case pipeline.TypeFloat32:
		return same("FLOAT")
	case pipeline.TypeFloat64:
		return same("DOUBLE")
	case pipeline.TypeDecimal:
		if fixedDecimal(c) {
			ddl := fmt.Sprintf("DECIMAL(%d,%d)", c.Precision, c.Scale)
			if c.Precision <= maxInt64Digits {
				// Staged as the scaled integer the Appender writes natively.
				return colType{ddl: ddl, stage: ddl, read: func(x string) string { return "CAST(" + x + " AS VARCHAR)" }}
			}
			return colType{ddl: ddl, stage: "VARCHAR",
				conv: func(x string) string { return "CAST(" + x + " AS " + ddl + ")" },
				read: func(x string) string { return "CAST(" + x + " AS VARCHAR)" }}
		}
		return same("VARCHAR")
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return same("BLOB")
	case pipeline.TypeUUID:
		return same("UUID")
	case pipeline.TypeJSON:
		return colType{ddl: "JSON", stage: "VARCHAR",
			conv: func(x string) string { return "CAST(" + x + " AS JSON)" },
			read: func(x string) string { return "CAST(" + x + " AS VARCHAR)" }}
	case pipeline.TypeDate:
		return colType{ddl: "DATE", stage: "INTEGER",
			conv: func(x string) string {
				return fmt.Sprintf("CASE WHEN %[1]s = %[2]d THEN 'infinity'::DATE WHEN %[1]s = -%[2]d THEN '-infinity'::DATE ELSE DATE '1970-01-01' + %[1]s END", x, dateInf)
			},
			read: func(x string) string { return "(" + x + " - DATE '1970-01-01')" }}
	case pipeline.TypeTime:
		return colType{ddl: "TIME", stage: "VARCHAR",
			conv: func(x string) string { return "CAST(" + x + " AS TIME)" },
			read: func(x string) string { return "epoch_us(" + x + ")" }}
	case pipeline.TypeTimeTZ:
		return colType{ddl: "TIMETZ", stage: "VARCHAR",
			conv: func(x string) string { return "CAST(" + x + " AS TIMETZ)" },
			read: func(x string) string {
				return "CASE WHEN " + x + " IS NULL THEN NULL ELSE {'us': epoch_us(" + x + "), 'off': extract('timezone' FROM " + x + ")} END"
			}}
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		ddl, mk := "TIMESTAMP", "make_timestamp"
		if t == pipeline.TypeTimestampTZ {
			ddl, mk = "TIMESTAMPTZ", "make_timestamptz"
		}
		return colType{ddl: ddl, stage: "BIGINT",
			conv: func(x string) string {
				return fmt.Sprintf("CASE WHEN %[1]s = %[2]d THEN 'infinity'::%[3]s WHEN %[1]s = -%[2]d THEN '-infinity'::%[3]s ELSE %[4]s(%[1]s) END", x, tsInf, ddl, mk)
			},
			read: func(x string) string {
				return fmt.Sprintf("CASE WHEN %[1]s = 'infinity'::%[3]s THEN %[2]d WHEN %[1]s = '-infinity'::%[3]s THEN -%[2]d ELSE epoch_us(%[1]s) END", x, tsInf, ddl)
			}}
	case pipeline.TypeInterval:
		return same("INTERVAL")
	default: // text, string, enum, set, inet, macaddr: exact text
		return same("VARCHAR")
	}
}

// fixedDecimal reports whether a decimal column fits DuckDB's DECIMAL.
func fixedDecimal(c *pipeline.Column) bool {
	return c.Precision > 0 && c.Precision <= 38 && c.Scale >= 0 && c.Scale <= c.Precision
}

// maxInt64Digits is the widest DECIMAL precision staged as a scaled int64
// (DuckDB stores DECIMAL(p,s) with p ≤ 18 in at most 64 bits); wider fixed
// decimals are staged as exact text.
const maxInt64Digits = 18

// scaledDecimal reports whether values of c (or its elements) are staged
// as scaled integers.
func scaledDecimal(c *pipeline.Column) bool {
	return fixedDecimal(c) && c.Precision <= maxInt64Digits &&
		(c.Type == pipeline.TypeDecimal || c.Type == pipeline.TypeArray && c.Elem == pipeline.TypeDecimal)
}

// toStage converts a record value to what the Appender writes into the
// staging column of c. nil stays NULL. Unchanged never reaches it.
func toStage(c *pipeline.Column, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	if c.Type != pipeline.TypeArray {
		return scalarToStage(c.Type, c, v)
	}
	list, ok := v.([]any)
	if !ok {
		return nil, valueErr("column %s: array value is %T", c.Name, v)
	}
	out := make([]any, len(list))
	for i, e := range list {
		if _, nested := e.([]any); nested {
			return nil, valueErr("column %s: multi-dimensional array does not fit LIST of %s", c.Name, c.Elem)
		}
		if e == nil {
			continue
		}
		x, err := scalarToStage(c.Elem, c, e)
		if err != nil {
			return nil, err
		}
		out[i] = x
	}
	return out, nil
}

// param converts a value of c to the SQL expression that turns it into
// the target type and the expression's parameters. Decimals staged as
// scaled integers are given as exact text instead, which a cast reads
// correctly; a list of them is spelled out as a literal (their text is
// digits, sign and point only), since a list parameter cannot mix NULL
// and text elements.
func param(c *pipeline.Column, v any) (expr string, args []any, err error) {
	ct := typeOf(c)
	if !scaledDecimal(c) {
		arg, err := toStage(c, v)
		if err != nil {
			return "", nil, err
		}
		expr = "?::" + ct.stage
		if ct.conv != nil {
			expr = ct.conv(expr)
		}
		return expr, []any{arg}, nil
	}
	text := func(e any) (string, error) {
		d, ok := e.(pipeline.Decimal)
		if !ok {
			return "", valueErr("column %s: %T is not a decimal value", c.Name, e)
		}
		return decimalText(c, d)
	}
	if v == nil {
		return "CAST(NULL AS " + ct.ddl + ")", nil, nil
	}
	if c.Type != pipeline.TypeArray {
		t, err := text(v)
		return "CAST(?::VARCHAR AS " + ct.ddl + ")", []any{t}, err
	}
	list, ok := v.([]any)
	if !ok {
		return "", nil, valueErr("column %s: array value is %T", c.Name, v)
	}
	elems := make([]string, len(list))
	for i, e := range list {
		elems[i] = "NULL"
		if e == nil {
			continue
		}
		t, err := text(e)
		if err != nil {
			return "", nil, err
		}
		elems[i] = "'" + t + "'"
	}
	return "CAST([" + strings.Join(elems, ", ") + "]::VARCHAR[] AS " + ct.ddl + ")", nil, nil
}

func scalarToStage(t pipeline.Type, c *pipeline.Column, v any) (any, error) {
	mismatch := func() error { return valueErr("column %s: %T is not a %s value", c.Name, v, t) }
	switch t {
	case pipeline.TypeBool:
		if _, ok := v.(bool); !ok {
			return nil, mismatch()
		}
		return v, nil
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		i, ok := v.(int64)
		if !ok {
			return nil, mismatch()
		}
		switch {
		case t == pipeline.TypeInt16 && (i < math.MinInt16 || i > math.MaxInt16),
			t == pipeline.TypeInt32 && (i < math.MinInt32 || i > math.MaxInt32):
			return nil, valueErr("column %s: %d out of %s range", c.Name, i, t)
		}
		return v, nil // the record's own interface value: no new allocation
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		u, ok := v.(uint64)
		if !ok {
			return nil, mismatch()
		}
		limit := map[pipeline.Type]uint64{pipeline.TypeUint8: math.MaxUint8, pipeline.TypeUint16: math.MaxUint16,
			pipeline.TypeUint32: math.MaxUint32, pipeline.TypeUint64: math.MaxUint64}[t]
		if u > limit {
			return nil, valueErr("column %s: %d out of %s range", c.Name, u, t)
		}
		return v, nil
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		f, ok := v.(float64)
		if !ok {
			return nil, mismatch()
		}
		if t == pipeline.TypeFloat32 {
			return float32(f), nil
		}
		return v, nil
	case pipeline.TypeDecimal:
		d, ok := v.(pipeline.Decimal)
		if !ok {
			return nil, mismatch()
		}
		if !fixedDecimal(c) {
			return d.String(), nil // exact text, NaN and infinities included
		}
		if c.Precision <= maxInt64Digits {
			return decimalInt(c, d)
		}
		return decimalText(c, d)
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		if _, ok := v.([]byte); !ok {
			return nil, mismatch()
		}
		return v, nil
	case pipeline.TypeUUID:
		u, ok := v.(pipeline.UUID)
		if !ok {
			return nil, mismatch()
		}
		return duck.UUID(u), nil
	case pipeline.TypeJSON:
		var s string
		switch x := v.(type) {
		case pipeline.JSON:
			s = string(x)
		case string:
			s = x
		default:
			return nil, mismatch()
		}
		if !json.Valid([]byte(s)) {
			return nil, valueErr("column %s: invalid JSON document", c.Name)
		}
		return s, nil
	case pipeline.TypeDate:
		d, ok := v.(pipeline.Date)
		if !ok {
			return nil, mismatch()
		}
		switch d.Special {
		case pipeline.PosInfinity:
			return int32(dateInf), nil
		case pipeline.NegInfinity:
			return int32(-dateInf), nil
		case pipeline.NaN:
			return nil, valueErr("column %s: NaN date", c.Name)
		}
		if d.Days < dateMin || d.Days > dateMax {
			return nil, valueErr("column %s: date %d days out of range", c.Name, d.Days)
		}
		return d.Days, nil
	case pipeline.TypeTime:
		tod, ok := v.(pipeline.TimeOfDay)
		if !ok {
			return nil, mismatch()
		}
		if tod < 0 || tod > dayMicros {
			return nil, valueErr("column %s: time of day %d µs out of range", c.Name, int64(tod))
		}
		return tod.String(), nil
	case pipeline.TypeTimeTZ:
		tz, ok := v.(pipeline.TimeTZ)
		if !ok {
			return nil, mismatch()
		}
		if tz.Micros < 0 || tz.Micros > dayMicros || tz.OffsetSec < -maxTZOffset || tz.OffsetSec > maxTZOffset {
			return nil, valueErr("column %s: time with zone out of range", c.Name)
		}
		off, sign := tz.OffsetSec, "+"
		if off < 0 {
			off, sign = -off, "-"
		}
		return fmt.Sprintf("%s%s%02d:%02d:%02d", pipeline.TimeOfDay(tz.Micros), sign, off/3600, off/60%60, off%60), nil
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		ts, ok := v.(pipeline.Timestamp)
		if !ok {
			return nil, mismatch()
		}
		switch ts.Special {
		case pipeline.PosInfinity:
			return int64(tsInf), nil
		case pipeline.NegInfinity:
			return int64(-tsInf), nil
		case pipeline.NaN:
			return nil, valueErr("column %s: NaN timestamp", c.Name)
		}
		if ts.Micros < tsMin || ts.Micros > tsMax {
			return nil, valueErr("column %s: timestamp %d µs out of range", c.Name, ts.Micros)
		}
		return ts.Micros, nil
	case pipeline.TypeInterval:
		iv, ok := v.(pipeline.Interval)
		if !ok {
			return nil, mismatch()
		}
		return duck.Interval{Months: iv.Months, Days: iv.Days, Micros: iv.Micros}, nil
	default:
		if _, ok := v.(string); !ok {
			return nil, mismatch()
		}
		return v, nil
	}
}

// decimalText renders d with exactly the column's scale, failing when it
// does not fit DECIMAL(p,s) exactly.
func decimalText(c *pipeline.Column, d pipeline.Decimal) (string, error) {
	u, err := decimalScaled(c, d)
	if err != nil {
		return "", err
	}
	return pipeline.Decimal{Unscaled: u, Scale: int32(c.Scale)}.String(), nil
}

// decimalScaled returns d × 10^scale of the column, failing when d does not
// fit DECIMAL(p,s) exactly.
func decimalScaled(c *pipeline.Column, d pipeline.Decimal) (*big.Int, error) {
	if !d.IsFinite() {
		return nil, valueErr("column %s: decimal %s has no DuckDB DECIMAL form", c.Name, d.Special)
	}
	u := new(big.Int)
	if d.Unscaled != nil {
		u.Set(d.Unscaled)
	}
	diff := int64(c.Scale) - int64(d.Scale)
	switch {
	case diff > 0:
		u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(diff), nil))
	case diff < 0:
		q, r := new(big.Int).QuoRem(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(-diff), nil), new(big.Int))
		if r.Sign() != 0 {
			return nil, valueErr("column %s: %s has more than %d fractional digits", c.Name, d, c.Scale)
		}
		u = q
	}
	if len(new(big.Int).Abs(u).String()) > c.Precision {
		return nil, valueErr("column %s: %s exceeds DECIMAL(%d,%d)", c.Name, d, c.Precision, c.Scale)
	}
	return u, nil
}

// pow10 holds 10^0 … 10^18.
var pow10 = func() (p [maxInt64Digits + 1]int64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// decimalInt returns d × 10^scale of a column of at most 18 digits as an
// int64, failing when d does not fit DECIMAL(p,s) exactly. Values whose
// unscaled integer fits an int64 take a path without big.Int arithmetic.
func decimalInt(c *pipeline.Column, d pipeline.Decimal) (int64, error) {
	if d.IsFinite() && (d.Unscaled == nil || d.Unscaled.IsInt64()) {
		var u int64
		if d.Unscaled != nil {
			u = d.Unscaled.Int64()
		}
		limit := pow10[c.Precision] // |result| must stay below 10^p
		diff := int64(c.Scale) - int64(d.Scale)
		ok := true
		switch {
		case u == 0:
		case diff > 0:
			if q := limit / pow10[min(diff, maxInt64Digits)]; diff > maxInt64Digits || u >= q || u <= -q {
				ok = false // too wide (or not representable here): the exact path decides
			} else {
				u *= pow10[diff]
			}
		case diff < 0:
			if -diff > maxInt64Digits || u%pow10[-diff] != 0 {
				ok = false
			} else {
				u /= pow10[-diff]
			}
		}
		if ok && u > -limit && u < limit {
			return u, nil
		}
	}
	u, err := decimalScaled(c, d)
	if err != nil {
		return 0, err
	}
	return u.Int64(), nil
}

// fromRead converts a value scanned through the column's read expression
// back to the record model's value type.
func fromRead(c *pipeline.Column, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	if c.Type != pipeline.TypeArray {
		return scalarFromRead(c.Type, c, v)
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("column %s: read %T for a list", c.Name, v)
	}
	out := make([]any, len(list))
	for i, e := range list {
		if e == nil {
			continue
		}
		x, err := scalarFromRead(c.Elem, c, e)
		if err != nil {
			return nil, err
		}
		out[i] = x
	}
	return out, nil
}

func scalarFromRead(t pipeline.Type, c *pipeline.Column, v any) (any, error) {
	bad := func() error { return fmt.Errorf("column %s: read %T for %s", c.Name, v, t) }
	switch t {
	case pipeline.TypeBool:
		return v, nil
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64,
		pipeline.TypeDate, pipeline.TypeTime, pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		var i int64
		switch x := v.(type) {
		case int16:
			i = int64(x)
		case int32:
			i = int64(x)
		case int64:
			i = x
		default:
			return nil, bad()
		}
		switch t {
		case pipeline.TypeDate:
			switch i {
			case dateInf:
				return pipeline.Date{Special: pipeline.PosInfinity}, nil
			case -dateInf:
				return pipeline.Date{Special: pipeline.NegInfinity}, nil
			}
			return pipeline.Date{Days: int32(i)}, nil
		case pipeline.TypeTime:
			return pipeline.TimeOfDay(i), nil
		case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
			switch i {
			case tsInf:
				return pipeline.Timestamp{Special: pipeline.PosInfinity}, nil
			case -tsInf:
				return pipeline.Timestamp{Special: pipeline.NegInfinity}, nil
			}
			return pipeline.Timestamp{Micros: i}, nil
		}
		return i, nil
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		switch x := v.(type) {
		case uint8:
			return uint64(x), nil
		case uint16:
			return uint64(x), nil
		case uint32:
			return uint64(x), nil
		case uint64:
			return x, nil
		}
		return nil, bad()
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		switch x := v.(type) {
		case float32:
			return float64(x), nil
		case float64:
			return x, nil
		}
		return nil, bad()
	case pipeline.TypeDecimal:
		s, ok := v.(string)
		if !ok {
			return nil, bad()
		}
		return pipeline.ParseDecimal(s)
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		b, ok := v.([]byte)
		if !ok {
			return nil, bad()
		}
		return b, nil
	case pipeline.TypeUUID:
		switch x := v.(type) {
		case []byte:
			if len(x) == 16 {
				var u pipeline.UUID
				copy(u[:], x)
				return u, nil
			}
		case duck.UUID:
			return pipeline.UUID(x), nil
		}
		return nil, bad()
	case pipeline.TypeJSON:
		s, ok := v.(string)
		if !ok {
			return nil, bad()
		}
		return pipeline.JSON(s), nil
	case pipeline.TypeTimeTZ:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, bad()
		}
		us, ok1 := m["us"].(int64)
		off, ok2 := m["off"].(int64)
		if !ok1 || !ok2 {
			return nil, bad()
		}
		return pipeline.TimeTZ{Micros: us, OffsetSec: int32(off)}, nil
	case pipeline.TypeInterval:
		iv, ok := v.(duck.Interval)
		if !ok {
			return nil, bad()
		}
		return pipeline.Interval{Months: iv.Months, Days: iv.Days, Micros: iv.Micros}, nil
	default:
		s, ok := v.(string)
		if !ok {
			return nil, bad()
		}
		return s, nil
	}
}

// quote quotes an SQL identifier.
func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

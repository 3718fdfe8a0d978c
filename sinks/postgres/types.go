package postgres

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/pipeline"
	pgsrc "github.com/sluice-cdc/sluice/sources/postgres"
)

// errValue marks values Postgres cannot hold: their records fail
// permanently (Invariant 7).
var errValue = errors.New("value not representable in postgres")

func valueErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errValue, fmt.Sprintf(format, args...))
}

// colType is a column's Postgres representation.
type colType struct {
	ddl string // the target column's type
	// stage is the staging column's type. Values of types pgx encodes in
	// binary directly (integers, floats, booleans, bytea, uuid, text,
	// numeric, date, timestamps) are staged in the target type; the others
	// (numeric(20,0) for uint64, jsonb, time, timetz, interval, arrays) are
	// staged as their Postgres text input form and cast to ddl.
	stage string
}

// cast returns expr converted from the staging type to the target type.
func (ct colType) cast(expr string) string {
	if ct.stage == ct.ddl {
		return expr
	}
	return expr + "::" + ct.ddl
}

// typeOf maps a column to its Postgres types. The mapping is type-faithful:
// every value keeps its exact type (numeric(p,s), timetz, interval, uuid,
// jsonb, arrays of the element type); enums, sets and network addresses are
// kept as text.
func typeOf(c *pipeline.Column) colType {
	if c.Type == pipeline.TypeArray {
		return colType{ddl: scalarDDL(c.Elem, c) + "[]", stage: "text"}
	}
	ddl := scalarDDL(c.Type, c)
	switch c.Type {
	case pipeline.TypeBool, pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64,
		pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32,
		pipeline.TypeFloat32, pipeline.TypeFloat64, pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry,
		pipeline.TypeUUID, pipeline.TypeText, pipeline.TypeString, pipeline.TypeEnum, pipeline.TypeSet,
		pipeline.TypeInet, pipeline.TypeMacaddr,
		pipeline.TypeDecimal, pipeline.TypeDate, pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		return colType{ddl: ddl, stage: ddl}
	}
	return colType{ddl: ddl, stage: "text"}
}

func scalarDDL(t pipeline.Type, c *pipeline.Column) string {
	switch t {
	case pipeline.TypeBool:
		return "boolean"
	case pipeline.TypeInt16, pipeline.TypeUint8:
		return "smallint"
	case pipeline.TypeInt32, pipeline.TypeUint16:
		return "integer"
	case pipeline.TypeInt64, pipeline.TypeUint32:
		return "bigint"
	case pipeline.TypeUint64:
		return "numeric(20,0)"
	case pipeline.TypeFloat32:
		return "real"
	case pipeline.TypeFloat64:
		return "double precision"
	case pipeline.TypeDecimal:
		if constrained(c) {
			return fmt.Sprintf("numeric(%d,%d)", c.Precision, c.Scale)
		}
		return "numeric"
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return "bytea"
	case pipeline.TypeUUID:
		return "uuid"
	case pipeline.TypeJSON:
		return "jsonb"
	case pipeline.TypeDate:
		return "date"
	case pipeline.TypeTime:
		return "time"
	case pipeline.TypeTimeTZ:
		return "timetz"
	case pipeline.TypeTimestamp:
		return "timestamp"
	case pipeline.TypeTimestampTZ:
		return "timestamptz"
	case pipeline.TypeInterval:
		return "interval"
	}
	// TypeText, TypeString, TypeEnum, TypeSet, TypeInet, TypeMacaddr.
	return "text"
}

// constrained reports whether a decimal column maps to numeric(p,s).
func constrained(c *pipeline.Column) bool {
	return c.Precision > 0 && c.Precision <= 1000 && c.Scale >= 0 && c.Scale <= c.Precision
}

// toStage converts a record-model value to the staging column's Go value:
// int64, float32, float64, bool, []byte, [16]byte, pgtype.Numeric,
// pgtype.Date, pgtype.Timestamp(tz) or string (the Postgres text input form
// for types staged as text). nil is NULL. Values Postgres
// cannot hold fail with errValue.
func toStage(c *pipeline.Column, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	if c.Type == pipeline.TypeArray {
		list, ok := v.([]any)
		if !ok {
			return nil, valueErr("column %s: array value is %T", c.Name, v)
		}
		if _, err := arrayDims(list, 1); err != nil {
			return nil, valueErr("column %s: %v", c.Name, err)
		}
		var b strings.Builder
		if err := appendArray(&b, c, list); err != nil {
			return nil, err
		}
		return b.String(), nil
	}
	switch c.Type {
	case pipeline.TypeBool:
		if x, ok := v.(bool); ok {
			return x, nil
		}
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		if x, ok := v.(int64); ok {
			lim := int64(math.MaxInt64)
			switch c.Type {
			case pipeline.TypeInt16:
				lim = math.MaxInt16
			case pipeline.TypeInt32:
				lim = math.MaxInt32
			}
			if x > lim || x < -lim-1 {
				return nil, valueErr("column %s: %d out of range for %s", c.Name, x, scalarDDL(c.Type, c))
			}
			return x, nil
		}
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32:
		if x, ok := v.(uint64); ok {
			lim := uint64(math.MaxUint32)
			switch c.Type {
			case pipeline.TypeUint8:
				lim = math.MaxUint8
			case pipeline.TypeUint16:
				lim = math.MaxUint16
			}
			if x > lim {
				return nil, valueErr("column %s: %d out of range for %s", c.Name, x, c.Type)
			}
			return int64(x), nil
		}
	case pipeline.TypeFloat32:
		if x, ok := v.(float64); ok {
			return float32(x), nil
		}
	case pipeline.TypeFloat64:
		if x, ok := v.(float64); ok {
			return x, nil
		}
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		if x, ok := v.([]byte); ok {
			return x, nil
		}
	case pipeline.TypeUUID:
		if x, ok := v.(pipeline.UUID); ok {
			return [16]byte(x), nil
		}
	case pipeline.TypeDecimal:
		if x, ok := v.(pipeline.Decimal); ok {
			if err := checkDecimal(c, x); err != nil {
				return nil, valueErr("column %s: %v", c.Name, err)
			}
			switch x.Special {
			case pipeline.NaN:
				return pgtype.Numeric{NaN: true, Valid: true}, nil
			case pipeline.PosInfinity:
				return pgtype.Numeric{InfinityModifier: pgtype.Infinity, Valid: true}, nil
			case pipeline.NegInfinity:
				return pgtype.Numeric{InfinityModifier: pgtype.NegativeInfinity, Valid: true}, nil
			}
			u := x.Unscaled
			if u == nil {
				u = new(big.Int)
			}
			return pgtype.Numeric{Int: u, Exp: -x.Scale, Valid: true}, nil
		}
	case pipeline.TypeDate:
		if x, ok := v.(pipeline.Date); ok {
			if _, err := dateText(x); err != nil {
				return nil, valueErr("column %s: %v", c.Name, err)
			}
			return pgtype.Date{Time: time.Unix(int64(x.Days)*86400, 0).UTC(), InfinityModifier: infinity(x.Special), Valid: true}, nil
		}
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		if x, ok := v.(pipeline.Timestamp); ok {
			if x.Special == pipeline.NaN || (x.Special == pipeline.Finite && x.Micros < minTimestamp) {
				_, err := timestampText(x, false)
				return nil, valueErr("column %s: %v", c.Name, err)
			}
			if c.Type == pipeline.TypeTimestamp {
				return pgtype.Timestamp{Time: time.UnixMicro(x.Micros).UTC(), InfinityModifier: infinity(x.Special), Valid: true}, nil
			}
			return pgtype.Timestamptz{Time: time.UnixMicro(x.Micros).UTC(), InfinityModifier: infinity(x.Special), Valid: true}, nil
		}
	case pipeline.TypeText, pipeline.TypeString, pipeline.TypeEnum, pipeline.TypeSet, pipeline.TypeInet, pipeline.TypeMacaddr:
		if x, ok := v.(string); ok {
			if err := checkText(x); err != nil {
				return nil, valueErr("column %s: %v", c.Name, err)
			}
			return x, nil
		}
	default:
		s, err := scalarText(c.Type, c, v)
		if err != nil {
			return nil, valueErr("column %s: %v", c.Name, err)
		}
		return s, nil
	}
	return nil, valueErr("column %s (%s): unexpected value type %T", c.Name, c.Type, v)
}

func infinity(s pipeline.Special) pgtype.InfinityModifier {
	switch s {
	case pipeline.PosInfinity:
		return pgtype.Infinity
	case pipeline.NegInfinity:
		return pgtype.NegativeInfinity
	}
	return pgtype.Finite
}

// checkText rejects strings a Postgres text value cannot hold.
func checkText(s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return errors.New("text contains a NUL byte")
	}
	if !utf8.ValidString(s) {
		return errors.New("text is not valid UTF-8")
	}
	return nil
}

// arrayDims checks that a (possibly nested) array is rectangular, as
// Postgres arrays are, and returns its dimensions.
func arrayDims(list []any, depth int) ([]int, error) {
	if depth > 6 {
		return nil, errors.New("array has more than 6 dimensions")
	}
	nested := -1
	var sub []int
	for _, e := range list {
		inner, isList := e.([]any)
		switch {
		case nested == -1 && isList:
			nested = 1
			d, err := arrayDims(inner, depth+1)
			if err != nil {
				return nil, err
			}
			sub = d
		case nested == -1:
			nested = 0
		case (nested == 1) != isList:
			return nil, errors.New("array mixes elements and sub-arrays")
		case isList:
			d, err := arrayDims(inner, depth+1)
			if err != nil {
				return nil, err
			}
			if fmt.Sprint(d) != fmt.Sprint(sub) {
				return nil, errors.New("multidimensional array is not rectangular")
			}
		}
	}
	if nested == 1 && (len(sub) == 0 || sub[0] == 0) {
		return nil, errors.New("array has empty sub-arrays")
	}
	return append([]int{len(list)}, sub...), nil
}

// appendArray writes the array input form, every element quoted.
func appendArray(b *strings.Builder, c *pipeline.Column, list []any) error {
	b.WriteByte('{')
	for i, e := range list {
		if i > 0 {
			b.WriteByte(',')
		}
		switch x := e.(type) {
		case nil:
			b.WriteString("NULL")
		case []any:
			if err := appendArray(b, c, x); err != nil {
				return err
			}
		default:
			s, err := scalarText(c.Elem, c, x)
			if err != nil {
				return valueErr("column %s: element %d: %v", c.Name, i, err)
			}
			b.WriteByte('"')
			for j := 0; j < len(s); j++ {
				if s[j] == '"' || s[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(s[j])
			}
			b.WriteByte('"')
		}
	}
	b.WriteByte('}')
	return nil
}

// scalarText renders a value in Postgres's text input form for type t
// (with c's precision and scale), checking that Postgres can hold it.
func scalarText(t pipeline.Type, c *pipeline.Column, v any) (string, error) {
	bad := func() (string, error) { return "", fmt.Errorf("unexpected value type %T for %s", v, t) }
	switch t {
	case pipeline.TypeBool:
		x, ok := v.(bool)
		if !ok {
			return bad()
		}
		return strconv.FormatBool(x), nil
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		x, ok := v.(int64)
		if !ok {
			return bad()
		}
		return strconv.FormatInt(x, 10), nil
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		x, ok := v.(uint64)
		if !ok {
			return bad()
		}
		return strconv.FormatUint(x, 10), nil
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		x, ok := v.(float64)
		if !ok {
			return bad()
		}
		switch {
		case math.IsNaN(x):
			return "NaN", nil
		case math.IsInf(x, 1):
			return "Infinity", nil
		case math.IsInf(x, -1):
			return "-Infinity", nil
		}
		if t == pipeline.TypeFloat32 {
			return strconv.FormatFloat(x, 'g', -1, 32), nil
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case pipeline.TypeDecimal:
		x, ok := v.(pipeline.Decimal)
		if !ok {
			return bad()
		}
		return decimalText(c, x)
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		x, ok := v.([]byte)
		if !ok {
			return bad()
		}
		return `\x` + hex.EncodeToString(x), nil
	case pipeline.TypeUUID:
		x, ok := v.(pipeline.UUID)
		if !ok {
			return bad()
		}
		return x.String(), nil
	case pipeline.TypeJSON:
		x, ok := v.(pipeline.JSON)
		if !ok {
			return bad()
		}
		if !json.Valid([]byte(x)) {
			return "", errors.New("invalid JSON")
		}
		if strings.Contains(string(x), `\u0000`) {
			return "", errors.New(`jsonb cannot hold \u0000`)
		}
		return string(x), nil
	case pipeline.TypeDate:
		x, ok := v.(pipeline.Date)
		if !ok {
			return bad()
		}
		return dateText(x)
	case pipeline.TypeTime:
		x, ok := v.(pipeline.TimeOfDay)
		if !ok {
			return bad()
		}
		if x < 0 || x > 86400_000_000 {
			return "", fmt.Errorf("time of day %d µs out of range", int64(x))
		}
		return x.String(), nil
	case pipeline.TypeTimeTZ:
		x, ok := v.(pipeline.TimeTZ)
		if !ok {
			return bad()
		}
		if x.Micros < 0 || x.Micros > 86400_000_000 {
			return "", fmt.Errorf("time of day %d µs out of range", x.Micros)
		}
		const maxOff = 15*3600 + 59*60 + 59
		if x.OffsetSec > maxOff || x.OffsetSec < -maxOff {
			return "", fmt.Errorf("time zone offset %d s out of range", x.OffsetSec)
		}
		off, sign := x.OffsetSec, byte('+')
		if off < 0 {
			off, sign = -off, '-'
		}
		return fmt.Sprintf("%s%c%02d:%02d:%02d", pipeline.TimeOfDay(x.Micros), sign, off/3600, off/60%60, off%60), nil
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		x, ok := v.(pipeline.Timestamp)
		if !ok {
			return bad()
		}
		return timestampText(x, t == pipeline.TypeTimestampTZ)
	case pipeline.TypeInterval:
		x, ok := v.(pipeline.Interval)
		if !ok {
			return bad()
		}
		us, sign := x.Micros, ""
		if us < 0 {
			sign = "-"
		}
		u := uint64(us)
		if us < 0 {
			u = uint64(-(us + 1)) + 1
		}
		return fmt.Sprintf("%d mons %d days %s%d:%02d:%02d.%06d", x.Months, x.Days, sign,
			u/3600e6, u/60e6%60, u/1e6%60, u%1e6), nil
	default: // text-like
		x, ok := v.(string)
		if !ok {
			return bad()
		}
		return x, checkText(x)
	}
}

// decimalText renders d for numeric(p,s) (or unconstrained numeric).
func decimalText(c *pipeline.Column, d pipeline.Decimal) (string, error) {
	if err := checkDecimal(c, d); err != nil {
		return "", err
	}
	switch d.Special {
	case pipeline.NaN:
		return "NaN", nil
	case pipeline.PosInfinity:
		return "Infinity", nil
	case pipeline.NegInfinity:
		return "-Infinity", nil
	}
	return d.String(), nil
}

// checkDecimal rejects infinities in constrained columns and values whose
// integer digits exceed p-s, which Postgres refuses.
func checkDecimal(c *pipeline.Column, d pipeline.Decimal) error {
	if d.Special != pipeline.Finite {
		if d.Special != pipeline.NaN && constrained(c) {
			return fmt.Errorf("numeric(%d,%d) cannot hold %s", c.Precision, c.Scale, d.Special)
		}
		return nil
	}
	if d.Unscaled == nil || !constrained(c) {
		return nil
	}
	// Fast path: the value is at the column's scale and fits an int64.
	if int(d.Scale) == c.Scale && d.Unscaled.IsInt64() && c.Precision < 19 {
		u := d.Unscaled.Int64()
		if u < 0 {
			u = -u
		}
		if u < pow10[c.Precision] {
			return nil
		}
		return fmt.Errorf("%s overflows numeric(%d,%d)", d, c.Precision, c.Scale)
	}
	// Postgres rounds to the scale (half away from zero), then checks the
	// precision.
	u := new(big.Int).Abs(d.Unscaled)
	if diff := int64(d.Scale) - int64(c.Scale); diff > 0 {
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(diff), nil)
		q, r := new(big.Int).QuoRem(u, p, new(big.Int))
		if r.Lsh(r, 1).Cmp(p) >= 0 {
			q.Add(q, big.NewInt(1))
		}
		u = q
	} else if diff < 0 {
		u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(-diff), nil))
	}
	if u.Sign() != 0 && len(u.String()) > c.Precision {
		return fmt.Errorf("%s overflows numeric(%d,%d)", d, c.Precision, c.Scale)
	}
	return nil
}

var pow10 = func() (p [19]int64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// civil converts days since 1970-01-01 to a proleptic Gregorian date.
func civil(days int64) (y, m, d int64) {
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// Postgres's date and timestamp ranges, in days and microseconds since
// 1970-01-01 (Julian day 0 is 4714-11-24 BC).
const (
	minDateDays  = -2440588
	maxDateDays  = 2147483494 - 2440588 - 1 // 5874897-12-31
	minTimestamp = -2440588 * 86400_000_000
)

func ymd(days int64) string {
	y, m, d := civil(days)
	bc := ""
	if y <= 0 {
		y, bc = 1-y, " BC"
	}
	return fmt.Sprintf("%04d-%02d-%02d", y, m, d) + "\x00" + bc
}

func dateText(x pipeline.Date) (string, error) {
	switch x.Special {
	case pipeline.PosInfinity:
		return "infinity", nil
	case pipeline.NegInfinity:
		return "-infinity", nil
	case pipeline.NaN:
		return "", errors.New("date cannot be NaN")
	}
	if int64(x.Days) < minDateDays || int64(x.Days) > maxDateDays {
		return "", fmt.Errorf("date %d days from 1970 out of range", x.Days)
	}
	date, bc, _ := strings.Cut(ymd(int64(x.Days)), "\x00")
	return date + bc, nil
}

func timestampText(x pipeline.Timestamp, tz bool) (string, error) {
	switch x.Special {
	case pipeline.PosInfinity:
		return "infinity", nil
	case pipeline.NegInfinity:
		return "-infinity", nil
	case pipeline.NaN:
		return "", errors.New("timestamp cannot be NaN")
	}
	if x.Micros < minTimestamp {
		return "", fmt.Errorf("timestamp %d µs from 1970 out of range", x.Micros)
	}
	days, us := x.Micros/86400_000_000, x.Micros%86400_000_000
	if us < 0 {
		days, us = days-1, us+86400_000_000
	}
	date, bc, _ := strings.Cut(ymd(days), "\x00")
	zone := ""
	if tz {
		zone = "+00"
	}
	return date + " " + pipeline.TimeOfDay(us).String() + zone + bc, nil
}

// readInfo is the type description DecodeText needs for a column's
// target type.
func readInfo(c *pipeline.Column) pgsrc.ColumnInfo {
	ti := scalarInfo(c.Type)
	if c.Type == pipeline.TypeArray {
		e := scalarInfo(c.Elem)
		ti = pgtypeInfo(0, "_"+e.Name)
		ti.Elem, ti.Delim = &e, ','
	}
	return pgsrc.ColumnInfo{Name: c.Name, OID: ti.OID, TypMod: -1, Type: ti}
}

func pgtypeInfo(oid uint32, name string) pgsrc.TypeInfo {
	return pgsrc.TypeInfo{OID: oid, Namespace: "pg_catalog", Name: name, Kind: 'b', Delim: ','}
}

func scalarInfo(t pipeline.Type) pgsrc.TypeInfo {
	oid := map[pipeline.Type]uint32{
		pipeline.TypeBool: pgtype.BoolOID, pipeline.TypeInt16: pgtype.Int2OID, pipeline.TypeUint8: pgtype.Int2OID,
		pipeline.TypeInt32: pgtype.Int4OID, pipeline.TypeUint16: pgtype.Int4OID, pipeline.TypeInt64: pgtype.Int8OID,
		pipeline.TypeUint32: pgtype.Int8OID, pipeline.TypeUint64: pgtype.NumericOID, pipeline.TypeDecimal: pgtype.NumericOID,
		pipeline.TypeFloat32: pgtype.Float4OID, pipeline.TypeFloat64: pgtype.Float8OID,
		pipeline.TypeBytes: pgtype.ByteaOID, pipeline.TypeBit: pgtype.ByteaOID, pipeline.TypeGeometry: pgtype.ByteaOID,
		pipeline.TypeUUID: pgtype.UUIDOID, pipeline.TypeJSON: pgtype.JSONBOID, pipeline.TypeDate: pgtype.DateOID,
		pipeline.TypeTime: pgtype.TimeOID, pipeline.TypeTimeTZ: pgtype.TimetzOID, pipeline.TypeTimestamp: pgtype.TimestampOID,
		pipeline.TypeTimestampTZ: pgtype.TimestamptzOID, pipeline.TypeInterval: pgtype.IntervalOID,
	}[t]
	if oid == 0 {
		oid = pgtype.TextOID
	}
	return pgtypeInfo(oid, t.String())
}

// fromText decodes a value read back in text form to the column's record
// model type.
func fromText(c *pipeline.Column, info pgsrc.ColumnInfo, raw []byte) (any, error) {
	v, err := pgsrc.DecodeText(info, raw)
	if err != nil {
		return nil, err
	}
	t := c.Type
	if t == pipeline.TypeArray {
		t = c.Elem
	}
	return fixup(t, v)
}

// fixup maps decoded values of the storage type back to the column's type
// (unsigned integers are stored in wider signed types or numeric(20,0)).
func fixup(t pipeline.Type, v any) (any, error) {
	switch x := v.(type) {
	case []any:
		for i := range x {
			var err error
			if x[i], err = fixup(t, x[i]); err != nil {
				return nil, err
			}
		}
		return x, nil
	case int64:
		switch t {
		case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32:
			return uint64(x), nil
		}
	case pipeline.Decimal:
		if t == pipeline.TypeUint64 {
			if !x.IsFinite() || x.Unscaled == nil || !x.Unscaled.IsUint64() || x.Scale != 0 {
				return nil, fmt.Errorf("stored value %s is not a uint64", x)
			}
			return x.Unscaled.Uint64(), nil
		}
	}
	return v, nil
}

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

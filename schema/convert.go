package schema

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/sluice-cdc/sluice/pipeline"
)

// Clamp values for infinite dates and timestamps (see KeySchema).
var (
	maxTimestampMicros = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
	minTimestampMicros = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	maxDateDays        = int32(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).Unix() / 86400)
	minDateDays        = int32(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix() / 86400)
)

// converter returns the function turning a non-nil pipeline value of type
// typ into the Go value hamba encodes for schema s. Encoding uses the
// writers below instead; the converters define the mapping they reproduce
// (and validate each column's zero value when a Codec is built):
//
//	int, int16 columns      int32          long columns       int64
//	uint64 / decimal(p,s)   *big.Rat, exact at the field's scale
//	VariableScaleDecimal    map{scale: int32, value: []byte}
//	float / double          float32 / float64
//	date                    int32 days     time-micros        time.Duration
//	timestamps              int64 micros   (never time.Time: hamba would
//	                                        apply the local zone to
//	                                        local-timestamp-micros)
//	string kinds            string         bytes kinds        []byte
//	interval                map{months, days, micros}
//	array                   []any of union maps
func (c *Codec) converter(col *pipeline.Column, typ pipeline.Type, s avro.Schema) (func(any) (any, error), error) {
	switch typ {
	case pipeline.TypeBool:
		return func(v any) (any, error) {
			b, ok := v.(bool)
			if !ok {
				return nil, errWrongType
			}
			return b, nil
		}, nil
	case pipeline.TypeInt16:
		return intConv(math.MinInt16, math.MaxInt16, true), nil
	case pipeline.TypeInt32:
		return intConv(math.MinInt32, math.MaxInt32, true), nil
	case pipeline.TypeInt64:
		return intConv(math.MinInt64, math.MaxInt64, false), nil
	case pipeline.TypeUint8:
		return uintConv(math.MaxUint8, true), nil
	case pipeline.TypeUint16:
		return uintConv(math.MaxUint16, true), nil
	case pipeline.TypeUint32:
		return uintConv(math.MaxUint32, false), nil
	case pipeline.TypeUint64:
		return func(v any) (any, error) {
			u, ok := asUint64(v)
			if !ok {
				return nil, errWrongType
			}
			return new(big.Rat).SetInt(new(big.Int).SetUint64(u)), nil
		}, nil
	case pipeline.TypeFloat32:
		return func(v any) (any, error) {
			switch f := v.(type) {
			case float64:
				return float32(f), nil
			case float32:
				return f, nil
			}
			return nil, errWrongType
		}, nil
	case pipeline.TypeFloat64:
		return func(v any) (any, error) {
			switch f := v.(type) {
			case float64:
				return f, nil
			case float32:
				return float64(f), nil
			}
			return nil, errWrongType
		}, nil
	case pipeline.TypeDecimal:
		if prec, scale, fixed := decimalShape(col); fixed {
			return func(v any) (any, error) { return fixedDecimal(v, prec, scale) }, nil
		}
		return varDecimal, nil
	case pipeline.TypeString, pipeline.TypeText, pipeline.TypeInet, pipeline.TypeMacaddr, pipeline.TypeEnum, pipeline.TypeSet:
		return func(v any) (any, error) {
			s, ok := v.(string)
			if !ok {
				return nil, errWrongType
			}
			return s, nil
		}, nil
	case pipeline.TypeJSON:
		return func(v any) (any, error) {
			switch j := v.(type) {
			case pipeline.JSON:
				return string(j), nil
			case string:
				return j, nil
			}
			return nil, errWrongType
		}, nil
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return func(v any) (any, error) {
			b, ok := v.([]byte)
			if !ok {
				return nil, errWrongType
			}
			return b, nil
		}, nil
	case pipeline.TypeUUID:
		return func(v any) (any, error) {
			switch u := v.(type) {
			case pipeline.UUID:
				return u.String(), nil
			case [16]byte:
				return pipeline.UUID(u).String(), nil
			}
			return nil, errWrongType
		}, nil
	case pipeline.TypeDate:
		return func(v any) (any, error) {
			d, ok := v.(pipeline.Date)
			if !ok {
				return nil, errWrongType
			}
			switch d.Special {
			case pipeline.Finite:
				return d.Days, nil
			case pipeline.PosInfinity:
				return maxDateDays, nil
			case pipeline.NegInfinity:
				return minDateDays, nil
			}
			return nil, fmt.Errorf("%w: date %s", ErrNotRepresentable, d.Special)
		}, nil
	case pipeline.TypeTime:
		return func(v any) (any, error) {
			t, ok := v.(pipeline.TimeOfDay)
			if !ok {
				return nil, errWrongType
			}
			if t < 0 || t > 86400e6 {
				return nil, fmt.Errorf("%w: time of day %d µs", ErrNotRepresentable, int64(t))
			}
			return time.Duration(t) * time.Microsecond, nil
		}, nil
	case pipeline.TypeTimeTZ:
		return func(v any) (any, error) {
			t, ok := v.(pipeline.TimeTZ)
			if !ok {
				return nil, errWrongType
			}
			if t.Micros < 0 || t.Micros > 86400e6 {
				return nil, fmt.Errorf("%w: time of day %d µs", ErrNotRepresentable, t.Micros)
			}
			return FormatTimeTZ(t), nil
		}, nil
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		return func(v any) (any, error) {
			var ts pipeline.Timestamp
			switch t := v.(type) {
			case pipeline.Timestamp:
				ts = t
			case time.Time:
				ts = pipeline.TimestampOf(t)
			default:
				return nil, errWrongType
			}
			switch ts.Special {
			case pipeline.Finite:
				return ts.Micros, nil
			case pipeline.PosInfinity:
				return maxTimestampMicros, nil
			case pipeline.NegInfinity:
				return minTimestampMicros, nil
			}
			return nil, fmt.Errorf("%w: timestamp %s", ErrNotRepresentable, ts.Special)
		}, nil
	case pipeline.TypeInterval:
		return func(v any) (any, error) {
			iv, ok := v.(pipeline.Interval)
			if !ok {
				return nil, errWrongType
			}
			return map[string]any{"months": iv.Months, "days": iv.Days, "micros": iv.Micros}, nil
		}, nil
	case pipeline.TypeArray:
		arr, ok := s.(*avro.ArraySchema)
		if !ok {
			return nil, fmt.Errorf("schema: %s: array column %q has schema %s", c.table.ID, col.Name, s.Type())
		}
		items := arr.Items().(*avro.UnionSchema).Types()[1]
		branch := branchName(items)
		elem, err := c.converter(col, col.Elem, items)
		if err != nil {
			return nil, err
		}
		return func(v any) (any, error) {
			a, ok := v.([]any)
			if !ok {
				return nil, errWrongType
			}
			out := make([]any, len(a))
			for i, e := range a {
				switch e.(type) {
				case nil:
					out[i] = nullUnion
					continue
				case []any:
					return nil, fmt.Errorf("%w: multi-dimensional array value (element %d is an array)", ErrNotRepresentable, i)
				}
				n, err := elem(e)
				if err != nil {
					return nil, fmt.Errorf("element %d (%T): %w", i, e, err)
				}
				out[i] = map[string]any{branch: n}
			}
			return out, nil
		}, nil
	}
	return nil, fmt.Errorf("schema: %s column %q: unsupported type %s", c.table.ID, col.Name, typ)
}

var errWrongType = errors.New("value of the wrong Go type for the column type")

func intConv(lo, hi int64, toInt32 bool) func(any) (any, error) {
	return func(v any) (any, error) {
		i, ok := asInt64(v)
		if !ok {
			return nil, errWrongType
		}
		if i < lo || i > hi {
			return nil, fmt.Errorf("%w: %d out of range", ErrNotRepresentable, i)
		}
		if toInt32 {
			return int32(i), nil
		}
		return i, nil
	}
}

func uintConv(hi uint64, toInt32 bool) func(any) (any, error) {
	return func(v any) (any, error) {
		u, ok := asUint64(v)
		if !ok {
			return nil, errWrongType
		}
		if u > hi {
			return nil, fmt.Errorf("%w: %d out of range", ErrNotRepresentable, u)
		}
		if toInt32 {
			return int32(u), nil
		}
		return int64(u), nil
	}
}

func asInt64(v any) (int64, bool) {
	switch i := v.(type) {
	case int64:
		return i, true
	case int:
		return int64(i), true
	case int32:
		return int64(i), true
	case int16:
		return int64(i), true
	case int8:
		return int64(i), true
	}
	return 0, false
}

func asUint64(v any) (uint64, bool) {
	switch u := v.(type) {
	case uint64:
		return u, true
	case uint:
		return uint64(u), true
	case uint32:
		return uint64(u), true
	case uint16:
		return uint64(u), true
	case uint8:
		return uint64(u), true
	}
	return 0, false
}

var ten = big.NewInt(10)

func pow10(n int) *big.Int { return new(big.Int).Exp(ten, big.NewInt(int64(n)), nil) }

// fixedDecimal rescales d exactly to scale digits and checks its precision;
// it never rounds.
func fixedDecimal(v any, prec, scale int) (any, error) {
	d, ok := v.(pipeline.Decimal)
	if !ok {
		return nil, errWrongType
	}
	if !d.IsFinite() {
		return nil, fmt.Errorf("%w: decimal %s", ErrNotRepresentable, d.Special)
	}
	u := d.Unscaled
	if u == nil {
		u = new(big.Int)
	}
	switch ds := int(d.Scale); {
	case ds < scale:
		u = new(big.Int).Mul(u, pow10(scale-ds))
	case ds > scale:
		q, r := new(big.Int).QuoRem(u, pow10(ds-scale), new(big.Int))
		if r.Sign() != 0 {
			return nil, fmt.Errorf("%w: %s has more than %d fractional digits", ErrNotRepresentable, d, scale)
		}
		u = q
	}
	if digits := len(new(big.Int).Abs(u).String()); u.Sign() != 0 && digits > prec {
		return nil, fmt.Errorf("%w: %s has %d digits, precision is %d", ErrNotRepresentable, d, digits, prec)
	}
	return new(big.Rat).SetFrac(u, pow10(scale)), nil
}

func varDecimal(v any) (any, error) {
	d, ok := v.(pipeline.Decimal)
	if !ok {
		return nil, errWrongType
	}
	if !d.IsFinite() {
		return nil, fmt.Errorf("%w: decimal %s", ErrNotRepresentable, d.Special)
	}
	u := d.Unscaled
	if u == nil {
		u = new(big.Int)
	}
	return map[string]any{"scale": d.Scale, "value": twosComplement(u)}, nil
}

// twosComplement is the minimal big-endian two's-complement form of i (Java's
// BigInteger.toByteArray, which Debezium's VariableScaleDecimal uses).
func twosComplement(i *big.Int) []byte {
	switch i.Sign() {
	case 0:
		return []byte{0}
	case 1:
		b := i.Bytes()
		if b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -i in n bytes: 2^(8n) + i, with n the smallest length whose sign bit is set.
	n := (new(big.Int).Sub(new(big.Int).Neg(i), big.NewInt(1)).BitLen())/8 + 1
	return new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), uint(8*n)), i).Bytes()
}

// fromTwosComplement reads a big-endian two's-complement integer.
func fromTwosComplement(b []byte) *big.Int {
	i := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		i.Sub(i, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return i
}

// FormatTimeTZ writes a time with zone as ISO-8601 "15:04:05.000000+05:30"
// (six fractional digits, the source's offset kept; "+05:30:15" when the
// offset has seconds).
func FormatTimeTZ(t pipeline.TimeTZ) string {
	us := t.Micros
	s := fmt.Sprintf("%02d:%02d:%02d.%06d", us/3600e6, us/60e6%60, us/1e6%60, us%1e6)
	off, sign := t.OffsetSec, byte('+')
	if off < 0 {
		off, sign = -off, '-'
	}
	s += fmt.Sprintf("%c%02d:%02d", sign, off/3600, off/60%60)
	if off%60 != 0 {
		s += fmt.Sprintf(":%02d", off%60)
	}
	return s
}

// ParseTimeTZ reads what FormatTimeTZ writes (fraction and offset seconds
// optional, "Z" for UTC accepted).
func ParseTimeTZ(s string) (pipeline.TimeTZ, error) {
	var h, m, sec int64
	var frac string
	i := 0
	n, err := fmt.Sscanf(s, "%2d:%2d:%2d", &h, &m, &sec)
	if err != nil || n != 3 || len(s) < 8 {
		return pipeline.TimeTZ{}, fmt.Errorf("timetz %q: bad time", s)
	}
	i = 8
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		frac, i = s[i+1:j], j
	}
	for len(frac) < 6 {
		frac += "0"
	}
	var us int64
	if _, err := fmt.Sscanf(frac[:6], "%d", &us); err != nil {
		return pipeline.TimeTZ{}, fmt.Errorf("timetz %q: bad fraction", s)
	}
	t := pipeline.TimeTZ{Micros: ((h*60+m)*60+sec)*1e6 + us}
	rest := s[i:]
	if rest == "Z" {
		return t, nil
	}
	if len(rest) < 6 || (rest[0] != '+' && rest[0] != '-') {
		return pipeline.TimeTZ{}, fmt.Errorf("timetz %q: bad offset", s)
	}
	var oh, om, os int32
	if len(rest) > 6 {
		_, err = fmt.Sscanf(rest[1:], "%2d:%2d:%2d", &oh, &om, &os)
	} else {
		_, err = fmt.Sscanf(rest[1:], "%2d:%2d", &oh, &om)
	}
	if err != nil {
		return pipeline.TimeTZ{}, fmt.Errorf("timetz %q: bad offset", s)
	}
	t.OffsetSec = oh*3600 + om*60 + os
	if rest[0] == '-' {
		t.OffsetSec = -t.OffsetSec
	}
	return t, nil
}

package schema

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// The direct writer: per column a writeFn appends the Avro binary of the
// column's (non-null) branch to a buffer, straight from the pipeline value,
// producing the bytes hamba writes for what converter returns, and the same
// errors. Codecs compile the writers once per table shape.

// writeFn appends the encoding of a non-nil pipeline value.
type writeFn func(b []byte, v any) ([]byte, error)

const (
	unionNull   = 0x00 // union branch 0 ("null"), zig-zag encoded
	unionValue1 = 0x02 // union branch 1 (the value type), zig-zag encoded
	// blockLength is the number of items per array block: hamba's default
	// (Config.BlockLength unset), which the Codec's configuration keeps.
	blockLength = 100
	// blockHeaderMax is room for a block header: two longs (-count, size).
	blockHeaderMax = 2 * binary.MaxVarintLen64
)

// appendLong writes an Avro int or long: zig-zag, then a varint.
func appendLong(b []byte, i int64) []byte {
	u := uint64(i<<1) ^ uint64(i>>63)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

func appendString(b []byte, s string) []byte {
	b = appendLong(b, int64(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, p []byte) []byte {
	b = appendLong(b, int64(len(p)))
	return append(b, p...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendOptLong(b []byte, v *int64) []byte {
	if v == nil {
		return append(b, unionNull)
	}
	b = append(b, unionValue1)
	return appendLong(b, *v)
}

const hexDigits = "0123456789abcdef"

// appendVersion writes v.String() (64 hex digits) as an Avro string.
func appendVersion(b []byte, v pipeline.Version) []byte {
	b = appendLong(b, 64)
	for _, c := range v {
		for sh := 56; sh >= 0; sh -= 8 {
			x := byte(c >> sh)
			b = append(b, hexDigits[x>>4], hexDigits[x&15])
		}
	}
	return b
}

// appendUUID writes u.String() as an Avro string.
func appendUUID(b []byte, u pipeline.UUID) []byte {
	b = appendLong(b, 36)
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&15])
	}
	return b
}

// openBlock reserves room for an array block header; closeBlock writes the
// header hamba writes (-count, byte size; count alone for an empty body)
// and moves the block's items behind it.
func openBlock(b []byte) []byte {
	var pad [blockHeaderMax]byte
	return append(b, pad[:]...)
}

func closeBlock(b []byte, start, count int) []byte {
	body := start + blockHeaderMax
	size := len(b) - body
	var hdr [blockHeaderMax]byte
	h := hdr[:0]
	if size > 0 {
		h = appendLong(h, -int64(count))
		h = appendLong(h, int64(size))
	} else {
		h = appendLong(h, int64(count))
	}
	n := copy(b[start:], h)
	copy(b[start+n:], b[body:])
	return b[:start+n+size]
}

// appendTwos writes x as Avro bytes: its big-endian two's complement in n
// bytes (n ≤ 9).
func appendTwos(b []byte, x int64, n int) []byte {
	b = appendLong(b, int64(n))
	for j := n - 1; j >= 0; j-- {
		b = append(b, byte(x>>(8*uint(j)))) // j = 8: the sign byte
	}
	return b
}

// appendHambaDecimal writes the unscaled value x of a bytes decimal as hamba
// does: |x|.BitLen()/8+1 bytes of two's complement (not always minimal for
// negative powers of two: -128 is ff 80).
func appendHambaDecimal(b []byte, x int64) []byte {
	a := uint64(x)
	if x < 0 {
		a = -a
	}
	return appendTwos(b, x, bits.Len64(a)/8+1)
}

// appendRatDecimal writes a *big.Rat as hamba's bytes decimal codec does.
func appendRatDecimal(b []byte, r *big.Rat, scale int) []byte {
	i := new(big.Int).Mul(r.Num(), pow10(scale))
	i.Div(i, r.Denom())
	var raw []byte
	switch i.Sign() {
	case 0:
		raw = []byte{0}
	case 1:
		raw = i.Bytes()
		if raw[0]&0x80 != 0 {
			raw = append([]byte{0}, raw...)
		}
	case -1:
		length := uint(i.BitLen()/8+1) * 8
		raw = i.Add(i, new(big.Int).Lsh(big.NewInt(1), length)).Bytes()
	}
	return appendBytes(b, raw)
}

var pow10s = func() (p [19]int64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// smallUnscaled returns d's unscaled value at scale when it and the
// rescaling fit an int64 exactly; ok=false sends the caller to the general
// (big.Int) path, which also reports the errors.
func smallUnscaled(d pipeline.Decimal, scale int) (int64, bool) {
	if d.Unscaled == nil {
		return 0, true
	}
	if !d.Unscaled.IsInt64() {
		return 0, false
	}
	x := d.Unscaled.Int64()
	switch ds := int(d.Scale); {
	case ds < scale:
		k := scale - ds
		if k >= len(pow10s) {
			return 0, x == 0
		}
		p := pow10s[k]
		if x > math.MaxInt64/p || x < math.MinInt64/p {
			return 0, false
		}
		x *= p
	case ds > scale:
		k := ds - scale
		if k >= len(pow10s) {
			return 0, x == 0
		}
		p := pow10s[k]
		if x%p != 0 {
			return 0, false
		}
		x /= p
	}
	return x, true
}

// writer returns the writeFn of a column of type typ (or an array's element
// type); it mirrors converter.
func (c *Codec) writer(col *pipeline.Column, typ pipeline.Type) (writeFn, error) {
	switch typ {
	case pipeline.TypeBool:
		return func(b []byte, v any) ([]byte, error) {
			x, ok := v.(bool)
			if !ok {
				return b, errWrongType
			}
			return appendBool(b, x), nil
		}, nil
	case pipeline.TypeInt16:
		return intWriter(math.MinInt16, math.MaxInt16), nil
	case pipeline.TypeInt32:
		return intWriter(math.MinInt32, math.MaxInt32), nil
	case pipeline.TypeInt64:
		return intWriter(math.MinInt64, math.MaxInt64), nil
	case pipeline.TypeUint8:
		return uintWriter(math.MaxUint8), nil
	case pipeline.TypeUint16:
		return uintWriter(math.MaxUint16), nil
	case pipeline.TypeUint32:
		return uintWriter(math.MaxUint32), nil
	case pipeline.TypeUint64:
		// decimal(20,0): the magnitude in Len64/8+1 bytes, as hamba writes it.
		return func(b []byte, v any) ([]byte, error) {
			u, ok := asUint64(v)
			if !ok {
				return b, errWrongType
			}
			n := bits.Len64(u)/8 + 1
			b = appendLong(b, int64(n))
			for j := n - 1; j >= 0; j-- {
				b = append(b, byte(u>>(8*uint(j)))) // j = 8: the leading 0
			}
			return b, nil
		}, nil
	case pipeline.TypeFloat32:
		return func(b []byte, v any) ([]byte, error) {
			var f float32
			switch x := v.(type) {
			case float64:
				f = float32(x)
			case float32:
				f = x
			default:
				return b, errWrongType
			}
			return binary.LittleEndian.AppendUint32(b, math.Float32bits(f)), nil
		}, nil
	case pipeline.TypeFloat64:
		return func(b []byte, v any) ([]byte, error) {
			var f float64
			switch x := v.(type) {
			case float64:
				f = x
			case float32:
				f = float64(x)
			default:
				return b, errWrongType
			}
			return binary.LittleEndian.AppendUint64(b, math.Float64bits(f)), nil
		}, nil
	case pipeline.TypeDecimal:
		if prec, scale, fixed := decimalShape(col); fixed {
			limit := int64(0) // |unscaled| < limit; 0: every int64 has at most prec digits
			if prec < len(pow10s) {
				limit = pow10s[prec]
			}
			return func(b []byte, v any) ([]byte, error) {
				if d, ok := v.(pipeline.Decimal); ok && d.Special == pipeline.Finite {
					if x, ok := smallUnscaled(d, scale); ok && (limit == 0 || (x < limit && x > -limit)) {
						return appendHambaDecimal(b, x), nil
					}
				}
				r, err := fixedDecimal(v, prec, scale)
				if err != nil {
					return b, err
				}
				return appendRatDecimal(b, r.(*big.Rat), scale), nil
			}, nil
		}
		// VariableScaleDecimal {scale: int, value: bytes}, the value in
		// minimal two's complement.
		return func(b []byte, v any) ([]byte, error) {
			d, ok := v.(pipeline.Decimal)
			if !ok {
				return b, errWrongType
			}
			if !d.IsFinite() {
				return b, fmt.Errorf("%w: decimal %s", ErrNotRepresentable, d.Special)
			}
			b = appendLong(b, int64(d.Scale))
			switch {
			case d.Unscaled == nil:
				return appendTwos(b, 0, 1), nil
			case d.Unscaled.IsInt64():
				x := d.Unscaled.Int64()
				m := x
				if x < 0 {
					m = ^x
				}
				return appendTwos(b, x, bits.Len64(uint64(m))/8+1), nil
			}
			return appendBytes(b, twosComplement(d.Unscaled)), nil
		}, nil
	case pipeline.TypeString, pipeline.TypeText, pipeline.TypeInet, pipeline.TypeMacaddr, pipeline.TypeEnum, pipeline.TypeSet:
		return func(b []byte, v any) ([]byte, error) {
			s, ok := v.(string)
			if !ok {
				return b, errWrongType
			}
			return appendString(b, s), nil
		}, nil
	case pipeline.TypeJSON:
		return func(b []byte, v any) ([]byte, error) {
			switch j := v.(type) {
			case pipeline.JSON:
				return appendString(b, string(j)), nil
			case string:
				return appendString(b, j), nil
			}
			return b, errWrongType
		}, nil
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return func(b []byte, v any) ([]byte, error) {
			p, ok := v.([]byte)
			if !ok {
				return b, errWrongType
			}
			return appendBytes(b, p), nil
		}, nil
	case pipeline.TypeUUID:
		return func(b []byte, v any) ([]byte, error) {
			switch u := v.(type) {
			case pipeline.UUID:
				return appendUUID(b, u), nil
			case [16]byte:
				return appendUUID(b, pipeline.UUID(u)), nil
			}
			return b, errWrongType
		}, nil
	case pipeline.TypeDate:
		return func(b []byte, v any) ([]byte, error) {
			d, ok := v.(pipeline.Date)
			if !ok {
				return b, errWrongType
			}
			switch d.Special {
			case pipeline.Finite:
				return appendLong(b, int64(d.Days)), nil
			case pipeline.PosInfinity:
				return appendLong(b, int64(maxDateDays)), nil
			case pipeline.NegInfinity:
				return appendLong(b, int64(minDateDays)), nil
			}
			return b, fmt.Errorf("%w: date %s", ErrNotRepresentable, d.Special)
		}, nil
	case pipeline.TypeTime:
		return func(b []byte, v any) ([]byte, error) {
			t, ok := v.(pipeline.TimeOfDay)
			if !ok {
				return b, errWrongType
			}
			if t < 0 || t > 86400e6 {
				return b, fmt.Errorf("%w: time of day %d µs", ErrNotRepresentable, int64(t))
			}
			return appendLong(b, int64(t)), nil
		}, nil
	case pipeline.TypeTimeTZ:
		return func(b []byte, v any) ([]byte, error) {
			t, ok := v.(pipeline.TimeTZ)
			if !ok {
				return b, errWrongType
			}
			if t.Micros < 0 || t.Micros > 86400e6 {
				return b, fmt.Errorf("%w: time of day %d µs", ErrNotRepresentable, t.Micros)
			}
			return appendTimeTZ(b, t), nil
		}, nil
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		return func(b []byte, v any) ([]byte, error) {
			var ts pipeline.Timestamp
			switch t := v.(type) {
			case pipeline.Timestamp:
				ts = t
			case time.Time:
				ts = pipeline.TimestampOf(t)
			default:
				return b, errWrongType
			}
			switch ts.Special {
			case pipeline.Finite:
				return appendLong(b, ts.Micros), nil
			case pipeline.PosInfinity:
				return appendLong(b, maxTimestampMicros), nil
			case pipeline.NegInfinity:
				return appendLong(b, minTimestampMicros), nil
			}
			return b, fmt.Errorf("%w: timestamp %s", ErrNotRepresentable, ts.Special)
		}, nil
	case pipeline.TypeInterval:
		return func(b []byte, v any) ([]byte, error) {
			iv, ok := v.(pipeline.Interval)
			if !ok {
				return b, errWrongType
			}
			b = appendLong(b, int64(iv.Months))
			b = appendLong(b, int64(iv.Days))
			return appendLong(b, iv.Micros), nil
		}, nil
	case pipeline.TypeArray:
		if typ == col.Elem {
			return nil, fmt.Errorf("schema: %s: array column %q has array elements", c.table.ID, col.Name)
		}
		elem, err := c.writer(col, col.Elem)
		if err != nil {
			return nil, err
		}
		// array<["null", T]> in blocks of blockLength items.
		return func(b []byte, v any) ([]byte, error) {
			a, ok := v.([]any)
			if !ok {
				return b, errWrongType
			}
			for i := 0; i < len(a); i += blockLength {
				start := len(b)
				b = openBlock(b)
				end := min(i+blockLength, len(a))
				for j := i; j < end; j++ {
					e := a[j]
					switch e.(type) {
					case nil:
						b = append(b, unionNull)
						continue
					case []any:
						return b, fmt.Errorf("%w: multi-dimensional array value (element %d is an array)", ErrNotRepresentable, j)
					}
					b = append(b, unionValue1)
					var err error
					if b, err = elem(b, e); err != nil {
						return b, fmt.Errorf("element %d (%T): %w", j, e, err)
					}
				}
				b = closeBlock(b, start, end-i)
			}
			return append(b, 0), nil
		}, nil
	}
	return nil, fmt.Errorf("schema: %s column %q: unsupported type %s", c.table.ID, col.Name, typ)
}

func intWriter(lo, hi int64) writeFn {
	return func(b []byte, v any) ([]byte, error) {
		i, ok := asInt64(v)
		if !ok {
			return b, errWrongType
		}
		if i < lo || i > hi {
			return b, fmt.Errorf("%w: %d out of range", ErrNotRepresentable, i)
		}
		return appendLong(b, i), nil
	}
}

func uintWriter(hi uint64) writeFn {
	return func(b []byte, v any) ([]byte, error) {
		u, ok := asUint64(v)
		if !ok {
			return b, errWrongType
		}
		if u > hi {
			return b, fmt.Errorf("%w: %d out of range", ErrNotRepresentable, u)
		}
		return appendLong(b, int64(u)), nil
	}
}

// appendTimeTZ writes FormatTimeTZ(t) as an Avro string without building
// the string; t.Micros is within a day.
func appendTimeTZ(b []byte, t pipeline.TimeTZ) []byte {
	off, sign := int64(t.OffsetSec), byte('+')
	if off < 0 {
		off, sign = -off, '-'
	}
	if off >= 100*3600 { // three-digit hours: leave the layout to FormatTimeTZ
		return appendString(b, FormatTimeTZ(t))
	}
	n := 21 // "15:04:05.000000+05:30"
	if off%60 != 0 {
		n += 3
	}
	b = appendLong(b, int64(n))
	us := t.Micros
	b = append2(b, us/3600e6)
	b = append(b, ':')
	b = append2(b, us/60e6%60)
	b = append(b, ':')
	b = append2(b, us/1e6%60)
	b = append(b, '.')
	frac := us % 1e6
	for d := int64(1e5); d > 0; d /= 10 {
		b = append(b, byte('0'+frac/d%10))
	}
	b = append(b, sign)
	b = append2(b, off/3600)
	b = append(b, ':')
	b = append2(b, off/60%60)
	if off%60 != 0 {
		b = append(b, ':')
		b = append2(b, off%60)
	}
	return b
}

// append2 writes 0 ≤ x < 100 as two digits.
func append2(b []byte, x int64) []byte { return append(b, byte('0'+x/10), byte('0'+x%10)) }

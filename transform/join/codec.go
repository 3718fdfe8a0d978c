package join

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"

	"github.com/sluice-cdc/sluice/pipeline"
)

// The state store keeps row values in a tagged binary form: each value is
// a tag byte followed by its fields, variable-size fields length-prefixed.
// Decoding gives back the same Go value of the record model's closed set
// (pipeline/value.go), so a joined row carries exactly what the source
// sent.

const (
	tagNull byte = iota
	tagFalse
	tagTrue
	tagInt
	tagUint
	tagFloat
	tagString
	tagBytes
	tagJSON
	tagDecimal
	tagUUID
	tagDate
	tagTimeOfDay
	tagTimeTZ
	tagTimestamp
	tagInterval
	tagArray
	tagUnchanged
)

// appendValue appends v's encoding. It fails on a Go type outside the
// record model.
func appendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, tagNull), nil
	case bool:
		if x {
			return append(b, tagTrue), nil
		}
		return append(b, tagFalse), nil
	case int64:
		return binary.AppendVarint(append(b, tagInt), x), nil
	case uint64:
		return binary.AppendUvarint(append(b, tagUint), x), nil
	case float64:
		return binary.BigEndian.AppendUint64(append(b, tagFloat), math.Float64bits(x)), nil
	case string:
		return appendBytes(append(b, tagString), x), nil
	case []byte:
		return appendBytes(append(b, tagBytes), string(x)), nil
	case pipeline.JSON:
		return appendBytes(append(b, tagJSON), string(x)), nil
	case pipeline.Decimal:
		b = binary.AppendVarint(append(b, tagDecimal, byte(x.Special)), int64(x.Scale))
		var mag []byte
		sign := byte(0)
		if x.Unscaled != nil {
			mag = x.Unscaled.Bytes()
			if x.Unscaled.Sign() < 0 {
				sign = 1
			}
		}
		return appendBytes(append(b, sign), string(mag)), nil
	case pipeline.UUID:
		return append(append(b, tagUUID), x[:]...), nil
	case pipeline.Date:
		return binary.AppendVarint(append(b, tagDate, byte(x.Special)), int64(x.Days)), nil
	case pipeline.TimeOfDay:
		return binary.AppendVarint(append(b, tagTimeOfDay), int64(x)), nil
	case pipeline.TimeTZ:
		return binary.AppendVarint(binary.AppendVarint(append(b, tagTimeTZ), x.Micros), int64(x.OffsetSec)), nil
	case pipeline.Timestamp:
		return binary.AppendVarint(append(b, tagTimestamp, byte(x.Special)), x.Micros), nil
	case pipeline.Interval:
		b = binary.AppendVarint(append(b, tagInterval), int64(x.Months))
		b = binary.AppendVarint(b, int64(x.Days))
		return binary.AppendVarint(b, x.Micros), nil
	case []any:
		b = binary.AppendUvarint(append(b, tagArray), uint64(len(x)))
		for _, e := range x {
			var err error
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	case pipeline.Unchanged:
		return append(b, tagUnchanged), nil
	}
	return nil, fmt.Errorf("join state: value of Go type %T is not in the record model", v)
}

// appendKeyValue encodes a key value so that keys SQL finds equal encode
// equally across the two sides of a join, whatever the columns' numeric
// types: an unsigned value that fits int64 is encoded as a signed one (a
// signed foreign key may refer to an unsigned primary key), and a decimal
// is reduced to its shortest scale, an integral one to the integer (5.00
// = 5.0 = 5, numeric = bigint). Text is compared byte for byte: a
// case- or pad-insensitive MySQL collation that finds 'a' = 'A ' is not
// followed.
func appendKeyValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case uint64:
		if x <= math.MaxInt64 {
			v = int64(x)
		}
	case pipeline.Decimal:
		v = canonicalDecimal(x)
	}
	return appendValue(b, v)
}

var bigTen = big.NewInt(10)

// canonicalDecimal returns d with trailing fractional zeros removed, as an
// int64 or uint64 when it is an integer that fits one.
func canonicalDecimal(d pipeline.Decimal) any {
	if d.Special != 0 || d.Unscaled == nil {
		return d
	}
	u, scale := new(big.Int).Set(d.Unscaled), d.Scale
	q, m := new(big.Int), new(big.Int)
	for scale > 0 && u.Sign() != 0 {
		q.QuoRem(u, bigTen, m)
		if m.Sign() != 0 {
			break
		}
		u, q = q, u
		scale--
	}
	if u.Sign() == 0 {
		scale = 0
	}
	for ; scale < 0; scale++ {
		u.Mul(u, bigTen)
	}
	if scale == 0 {
		if u.IsInt64() {
			return u.Int64()
		}
		if u.IsUint64() {
			return u.Uint64()
		}
	}
	return pipeline.Decimal{Unscaled: u, Scale: scale}
}

func appendBytes(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errCorrupt = errors.New("join state: corrupt value encoding")

// reader decodes what appendValue wrote.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errCorrupt
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) varint() int64 {
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *reader) uvarint() uint64 {
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *reader) fixed(n int) []byte {
	if n < 0 || len(r.b) < n {
		r.fail()
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	return r.fixed(int(n))
}

func (r *reader) value() any {
	switch tag := r.byte(); tag {
	case tagNull:
		return nil
	case tagFalse:
		return false
	case tagTrue:
		return true
	case tagInt:
		return r.varint()
	case tagUint:
		return r.uvarint()
	case tagFloat:
		b := r.fixed(8)
		if b == nil {
			return nil
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b))
	case tagString:
		return string(r.bytes())
	case tagBytes:
		return append([]byte{}, r.bytes()...)
	case tagJSON:
		return pipeline.JSON(r.bytes())
	case tagDecimal:
		special := pipeline.Special(r.byte())
		scale := int32(r.varint())
		sign := r.byte()
		mag := r.bytes()
		d := pipeline.Decimal{Special: special, Scale: scale}
		if special == pipeline.Finite {
			d.Unscaled = new(big.Int).SetBytes(mag)
			if sign == 1 {
				d.Unscaled.Neg(d.Unscaled)
			}
		}
		return d
	case tagUUID:
		var u pipeline.UUID
		copy(u[:], r.fixed(16))
		return u
	case tagDate:
		special := pipeline.Special(r.byte())
		return pipeline.Date{Special: special, Days: int32(r.varint())}
	case tagTimeOfDay:
		return pipeline.TimeOfDay(r.varint())
	case tagTimeTZ:
		micros := r.varint()
		return pipeline.TimeTZ{Micros: micros, OffsetSec: int32(r.varint())}
	case tagTimestamp:
		special := pipeline.Special(r.byte())
		return pipeline.Timestamp{Special: special, Micros: r.varint()}
	case tagInterval:
		months := int32(r.varint())
		days := int32(r.varint())
		return pipeline.Interval{Months: months, Days: days, Micros: r.varint()}
	case tagArray:
		n := r.uvarint()
		if n > uint64(len(r.b)) {
			r.fail()
			return nil
		}
		a := make([]any, n)
		for i := range a {
			a[i] = r.value()
		}
		return a
	case tagUnchanged:
		return pipeline.UnchangedValue
	default:
		r.fail()
		return nil
	}
}

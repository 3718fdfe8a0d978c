// Package binform is the binary form of record values that embedded
// state stores keep (the join's rows, the windows' contributions): each
// value is a tag byte followed by its fields, variable-size fields
// length-prefixed. Decoding gives back the same Go value of the record
// model's closed set (pipeline/value.go), so what a store gives back is
// exactly what the source sent.
package binform

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"

	"github.com/sluice-cdc/sluice/pipeline"
)

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

// Append appends v's encoding. It fails on a Go type outside the record
// model.
func Append(b []byte, v any) ([]byte, error) {
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
		return AppendString(append(b, tagString), x), nil
	case []byte:
		return AppendString(append(b, tagBytes), string(x)), nil
	case pipeline.JSON:
		return AppendString(append(b, tagJSON), string(x)), nil
	case pipeline.Decimal:
		b = binary.AppendVarint(append(b, tagDecimal, byte(x.Special)), int64(x.Scale))
		sign := byte(0)
		if x.Unscaled != nil && x.Unscaled.Sign() < 0 {
			sign = 1
		}
		return appendMagnitude(append(b, sign), x.Unscaled), nil
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
			if b, err = Append(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	case pipeline.Unchanged:
		return append(b, tagUnchanged), nil
	}
	return nil, fmt.Errorf("binform: value of Go type %T is not in the record model", v)
}

// appendMagnitude appends the big-endian bytes of |u| without leading
// zeros (what u.Bytes gives), length-prefixed, without allocating.
func appendMagnitude(b []byte, u *big.Int) []byte {
	if u == nil {
		return append(b, 0)
	}
	n := (u.BitLen() + 7) / 8
	b = binary.AppendUvarint(b, uint64(n))
	words := u.Bits()
	const wordBytes = bits.UintSize / 8
	for i := n - 1; i >= 0; i-- {
		b = append(b, byte(words[i/wordBytes]>>(8*(i%wordBytes))))
	}
	return b
}

// AppendString appends s, length-prefixed (Reader.Bytes reads it).
func AppendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// ErrCorrupt is what a Reader reports for bytes Append did not write.
var ErrCorrupt = errors.New("binform: corrupt value encoding")

// Reader decodes what Append and AppendString wrote, and the varints and
// fixed fields written beside them. A failed read leaves ErrCorrupt in
// Err and zero values; the calls after it read nothing.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is ErrCorrupt once a read failed.
func (r *Reader) Err() error { return r.err }

// Len is how many bytes are left.
func (r *Reader) Len() int { return len(r.b) }

// Rest is the bytes left (not copied).
func (r *Reader) Rest() []byte { return r.b }

func (r *Reader) fail() {
	if r.err == nil {
		r.err = ErrCorrupt
	}
	r.b = nil
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// Varint reads a signed varint.
func (r *Reader) Varint() int64 {
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

// Fixed reads n bytes (not copied).
func (r *Reader) Fixed(n int) []byte {
	if n < 0 || len(r.b) < n {
		r.fail()
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

// Bytes reads what AppendString wrote (not copied).
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	return r.Fixed(int(n))
}

// Value reads what Append wrote.
func (r *Reader) Value() any {
	switch tag := r.Byte(); tag {
	case tagNull:
		return nil
	case tagFalse:
		return false
	case tagTrue:
		return true
	case tagInt:
		return r.Varint()
	case tagUint:
		return r.Uvarint()
	case tagFloat:
		b := r.Fixed(8)
		if b == nil {
			return nil
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b))
	case tagString:
		return string(r.Bytes())
	case tagBytes:
		return append([]byte{}, r.Bytes()...)
	case tagJSON:
		return pipeline.JSON(r.Bytes())
	case tagDecimal:
		special := pipeline.Special(r.Byte())
		scale := int32(r.Varint())
		sign := r.Byte()
		mag := r.Bytes()
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
		copy(u[:], r.Fixed(16))
		return u
	case tagDate:
		special := pipeline.Special(r.Byte())
		return pipeline.Date{Special: special, Days: int32(r.Varint())}
	case tagTimeOfDay:
		return pipeline.TimeOfDay(r.Varint())
	case tagTimeTZ:
		micros := r.Varint()
		return pipeline.TimeTZ{Micros: micros, OffsetSec: int32(r.Varint())}
	case tagTimestamp:
		special := pipeline.Special(r.Byte())
		return pipeline.Timestamp{Special: special, Micros: r.Varint()}
	case tagInterval:
		months := int32(r.Varint())
		days := int32(r.Varint())
		return pipeline.Interval{Months: months, Days: days, Micros: r.Varint()}
	case tagArray:
		n := r.Uvarint()
		if n > uint64(len(r.b)) {
			r.fail()
			return nil
		}
		a := make([]any, n)
		for i := range a {
			a[i] = r.Value()
		}
		return a
	case tagUnchanged:
		return pipeline.UnchangedValue
	default:
		r.fail()
		return nil
	}
}

// AppendShape appends a table shape: its database, columns and key (the
// schema and table names are the caller's to keep).
func AppendShape(b []byte, t *pipeline.Table) ([]byte, error) {
	b = AppendString(b, t.ID.Database)
	b = binary.AppendUvarint(b, uint64(len(t.Columns)))
	for i := range t.Columns {
		c := &t.Columns[i]
		b = AppendString(b, c.Name)
		b = append(b, byte(c.Type), byte(c.Elem), boolByte(c.Nullable), boolByte(c.Key))
		b = binary.AppendVarint(binary.AppendVarint(b, int64(c.Precision)), int64(c.Scale))
		b = binary.AppendUvarint(b, uint64(len(c.Enum)))
		for _, l := range c.Enum {
			b = AppendString(b, l)
		}
		b = AppendString(AppendString(b, c.SourceType), c.Comment)
		var err error
		if b, err = Append(b, c.Missing); err != nil {
			return nil, fmt.Errorf("shape of %s, column %s: %w", t.ID, c.Name, err)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(t.KeyIdx)))
	for _, k := range t.KeyIdx {
		b = binary.AppendUvarint(b, uint64(k))
	}
	return b, nil
}

// ReadShape reads what AppendShape wrote, as table id (its database from
// the bytes).
func ReadShape(r *Reader, id pipeline.TableID) (*pipeline.Table, error) {
	id.Database = string(r.Bytes())
	n := r.Uvarint()
	if r.Err() != nil || n > uint64(r.Len()) {
		return nil, ErrCorrupt
	}
	t := &pipeline.Table{ID: id, Columns: make([]pipeline.Column, n)}
	for i := range t.Columns {
		c := &t.Columns[i]
		c.Name = string(r.Bytes())
		c.Type, c.Elem, c.Nullable, c.Key = pipeline.Type(r.Byte()), pipeline.Type(r.Byte()), r.Byte() == 1, r.Byte() == 1
		c.Precision, c.Scale = int(r.Varint()), int(r.Varint())
		ne := r.Uvarint()
		if ne > uint64(r.Len()) {
			return nil, ErrCorrupt
		}
		for range ne {
			c.Enum = append(c.Enum, string(r.Bytes()))
		}
		c.SourceType = string(r.Bytes())
		c.Comment = string(r.Bytes())
		c.Missing = r.Value()
	}
	nk := r.Uvarint()
	if nk > n {
		return nil, ErrCorrupt
	}
	for range nk {
		k := r.Uvarint()
		if k >= n {
			return nil, ErrCorrupt
		}
		t.KeyIdx = append(t.KeyIdx, int(k))
	}
	return t, r.Err()
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// AppendVersion appends v's 32 bytes, big-endian (byte order is version
// order).
func AppendVersion(b []byte, v pipeline.Version) []byte {
	for _, c := range v {
		b = binary.BigEndian.AppendUint64(b, c)
	}
	return b
}

// Version reads what AppendVersion wrote.
func (r *Reader) Version() pipeline.Version {
	var v pipeline.Version
	if b := r.Fixed(32); b != nil {
		for i := range v {
			v[i] = binary.BigEndian.Uint64(b[i*8:])
		}
	}
	return v
}

package schema

import (
	"math"
	"math/big"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/sluice-cdc/sluice/pipeline"
)

// missingDefault returns the Avro default of column c's missing value
// (pipeline.Column.Missing: the value rows that existed when ALTER TABLE
// … ADD COLUMN … DEFAULT ran hold with no change event) in the form
// hamba takes field defaults, for the column's type schema typ. A
// consumer that reads the table's older events with a newer schema as
// its reader schema then gets that value for them, as the table's rows
// hold it. false when there is no default to give: no missing value, one
// the mapping cannot represent (a decimal NaN, a non-finite float, which
// JSON cannot write), or an array (its items are unions, and a union's
// default can only be its first branch, null).
func (b *builder) missingDefault(c *pipeline.Column, typ avro.Schema) (any, bool) {
	if c.Missing == nil || c.Type == pipeline.TypeArray {
		return nil, false
	}
	conv, err := (&Codec{table: b.t}).converter(c, c.Type, typ)
	if err != nil {
		return nil, false
	}
	v, err := conv(c.Missing)
	if err != nil {
		return nil, false
	}
	return defaultForm(typ, v)
}

// defaultForm turns a value the converters produce for schema s into the
// JSON form of an Avro default (bytes as a string of code points 0-255,
// logical types as their underlying type).
func defaultForm(s avro.Schema, v any) (any, bool) {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if ps, ok := s.(*avro.PrimitiveSchema); ok && ps.Logical() != nil {
		switch ps.Logical().Type() {
		case avro.Decimal, avro.UUID:
		default:
			// hamba, which sluice's own readers use, cannot encode the
			// default of a union whose branch is a date or time logical
			// type: such a default would make older events unreadable.
			return nil, false
		}
	}
	switch s.Type() {
	case avro.Boolean, avro.String:
		switch v.(type) {
		case bool, string:
			return v, true
		}
	case avro.Int:
		if i, ok := v.(int32); ok {
			return int(i), true
		}
	case avro.Long:
		switch x := v.(type) {
		case int64:
			return x, true
		case time.Duration:
			return int64(x / time.Microsecond), true
		}
	case avro.Float:
		if f, ok := v.(float32); ok && !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) {
			return f, true
		}
	case avro.Double:
		if f, ok := v.(float64); ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, true
		}
	case avro.Bytes:
		switch x := v.(type) {
		case []byte:
			return codePoints(x), true
		case *big.Rat:
			ps, ok := s.(*avro.PrimitiveSchema)
			if !ok {
				return nil, false
			}
			dec, ok := ps.Logical().(*avro.DecimalLogicalSchema)
			if !ok {
				return nil, false
			}
			scaled := new(big.Rat).Mul(x, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(dec.Scale())), nil)))
			if !scaled.IsInt() {
				return nil, false
			}
			return codePoints(twosComplement(scaled.Num())), true
		}
	}
	// Records (interval, a variable-scale decimal) neither: hamba reads
	// a record default inside a union as a union's branch map.
	return nil, false
}

// codePoints is b as the string an Avro default gives bytes in: each
// byte the code point of its value.
func codePoints(b []byte) string {
	r := make([]rune, len(b))
	for i, x := range b {
		r[i] = rune(x)
	}
	return string(r)
}

package reshape

import (
	"fmt"
	"math/big"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
	"github.com/sluice-cdc/sluice/transform/eval"
)

// The casts (Converter):
//
//	any type → string          its text form (package textform: decimals
//	                           exact, timestamps RFC 3339, bytes base64, …)
//	string → any type          the same text form read back; a string that
//	                           is not one rejects the record
//	between int16, int32, int64, float32, float64 and decimal(p,s)
//	                           exact where the target holds the value: an
//	                           integer out of range, a fraction cast to an
//	                           integer or a decimal with more integer
//	                           digits than p rejects the record; a decimal
//	                           rounds half away from zero to s; a float
//	                           target takes the nearest float
//	bool ↔ integer             false/true ↔ 0/1 (any other integer is true)
//	between date, timestamp and timestamptz
//	                           a date is its midnight; a timestamp cast to
//	                           a date is its day; timestamp ↔ timestamptz
//	                           reads the wall clock as UTC
//
// Anything else is refused when the shape is checked.

// Converter returns the conversion of values of column from to column
// to's type (nil: none needed), or why there is none.
func Converter(from, to *pipeline.Column) (func(any) (any, error), error) {
	ft, tt := family(from.Type), family(to.Type)
	switch {
	case from.Type == to.Type && (to.Type != pipeline.TypeDecimal || to.Precision == 0):
		return nil, nil
	case to.Type == pipeline.TypeString:
		return func(v any) (any, error) { return textform.Encode(from, v) }, nil
	case ft == "text":
		return func(v any) (any, error) {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%T is not text", v)
			}
			return textform.Decode(to, s)
		}, nil
	case ft == "number" && tt == "number":
		integer := tt == "number" && isInteger(to.Type)
		return func(v any) (any, error) {
			if integer {
				var err error
				if v, err = integral(v); err != nil {
					return nil, err
				}
			}
			return eval.FromExpr(to, v)
		}, nil
	case from.Type == pipeline.TypeBool && isInteger(to.Type):
		return func(v any) (any, error) {
			if v == true {
				return int64(1), nil
			}
			return int64(0), nil
		}, nil
	case isInteger(from.Type) && to.Type == pipeline.TypeBool:
		return func(v any) (any, error) {
			switch x := v.(type) {
			case int64:
				return x != 0, nil
			case uint64:
				return x != 0, nil
			}
			return nil, fmt.Errorf("%T is not an integer", v)
		}, nil
	case ft == "time" && tt == "time":
		return func(v any) (any, error) {
			t, err := eval.ValueOf(from, v, "cast")
			if err != nil {
				return nil, err
			}
			return eval.FromExpr(to, t)
		}, nil
	}
	return nil, fmt.Errorf("a cast from %s to %s is not supported (any type casts to and from string; numbers, and dates and timestamps, cast among themselves; bool and integers both ways)", from.Type, to.Type)
}

func family(t pipeline.Type) string {
	switch t {
	case pipeline.TypeString, pipeline.TypeText, pipeline.TypeEnum:
		return "text"
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64, pipeline.TypeUint8, pipeline.TypeUint16,
		pipeline.TypeUint32, pipeline.TypeUint64, pipeline.TypeFloat32, pipeline.TypeFloat64, pipeline.TypeDecimal:
		return "number"
	case pipeline.TypeDate, pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		return "time"
	}
	return ""
}

func isInteger(t pipeline.Type) bool {
	switch t {
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64, pipeline.TypeUint8, pipeline.TypeUint16,
		pipeline.TypeUint32, pipeline.TypeUint64:
		return true
	}
	return false
}

// integral returns a float's or a decimal's value as an integer, or an
// error when it has a fraction.
func integral(v any) (any, error) {
	switch x := v.(type) {
	case float64:
		if x != float64(int64(x)) {
			return nil, fmt.Errorf("%v has a fraction; an integer cannot hold it", x)
		}
		return int64(x), nil
	case pipeline.Decimal:
		if !x.IsFinite() {
			return nil, fmt.Errorf("%v is not an integer", x)
		}
		u := x.Unscaled
		if u == nil {
			return int64(0), nil
		}
		if x.Scale <= 0 {
			n := new(big.Int).Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-x.Scale)), nil))
			if !n.IsInt64() {
				return nil, fmt.Errorf("%v is out of range for an integer", x)
			}
			return n.Int64(), nil
		}
		q, m := new(big.Int).QuoRem(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(x.Scale)), nil), new(big.Int))
		if m.Sign() != 0 {
			return nil, fmt.Errorf("%v has a fraction; an integer cannot hold it", x)
		}
		if !q.IsInt64() {
			return nil, fmt.Errorf("%v is out of range for an integer", x)
		}
		return q.Int64(), nil
	}
	return v, nil
}

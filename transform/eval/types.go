package eval

import (
	"reflect"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
)

// How expressions see the record model's values (TypeOf, ValueOf):
//
//	bool                              bool
//	int16, int32, int64               int64
//	uint8 … uint64                    uint64
//	float32, float64                  float64
//	decimal                           pipeline.Decimal (exact; decimal.go)
//	string, text, enum, set, inet, macaddr   string
//	json                              string (the document's text)
//	bytes, bit, geometry              []uint8
//	uuid                              string (8-4-4-4-12 lower-case hex)
//	date, timestamp, timestamptz      time.Time in UTC (a date at midnight)
//	time                              time.Duration since midnight
//	timetz, interval                  string (their text form, package textform)
//	array                             []any of the element's form
//
// A value the form cannot hold (an infinite date or timestamp, a NaN
// decimal is fine) is a run-time error naming the column.

var (
	typeBool     = reflect.TypeFor[bool]()
	typeInt      = reflect.TypeFor[int64]()
	typeUint     = reflect.TypeFor[uint64]()
	typeFloat    = reflect.TypeFor[float64]()
	typeDecimal  = reflect.TypeFor[pipeline.Decimal]()
	typeString   = reflect.TypeFor[string]()
	typeBytes    = reflect.TypeFor[[]byte]()
	typeTime     = reflect.TypeFor[time.Time]()
	typeDuration = reflect.TypeFor[time.Duration]()
	typeList     = reflect.TypeFor[[]any]()
)

// TypeOf is the Go type expressions see for column c.
func TypeOf(c *pipeline.Column) reflect.Type { return typeOfType(c.Type) }

func typeOfType(t pipeline.Type) reflect.Type {
	switch t {
	case pipeline.TypeBool:
		return typeBool
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		return typeInt
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		return typeUint
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		return typeFloat
	case pipeline.TypeDecimal:
		return typeDecimal
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return typeBytes
	case pipeline.TypeDate, pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		return typeTime
	case pipeline.TypeTime:
		return typeDuration
	case pipeline.TypeArray:
		return typeList
	}
	return typeString
}

// valueError is a value an expression cannot read.
type valueError struct {
	col string
	msg string
}

func (e *valueError) Error() string { return e.col + ": " + e.msg }

// ValueOf converts v, a value of column c in the image named image
// ("before" or "after"), to the form TypeOf(c) gives expressions. nil
// stays nil (NULL); an unchanged value the change does not carry is an
// error.
func ValueOf(c *pipeline.Column, v any, image string) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case pipeline.Unchanged:
		return nil, &valueError{col: image + "." + c.Name, msg: "the change does not carry this value (" + pipeline.NotCarried + ")"}
	case bool, int64, uint64, float64, string, []byte, pipeline.Decimal:
		return v, nil
	case pipeline.JSON:
		return string(x), nil
	case pipeline.UUID:
		return x.String(), nil
	case pipeline.Date:
		if x.Special != pipeline.Finite {
			return nil, &valueError{col: image + "." + c.Name, msg: "the date is " + x.Special.String() + ", which a time cannot hold"}
		}
		return x.Time(), nil
	case pipeline.Timestamp:
		if x.Special != pipeline.Finite {
			return nil, &valueError{col: image + "." + c.Name, msg: "the timestamp is " + x.Special.String() + ", which a time cannot hold"}
		}
		return x.Time(), nil
	case pipeline.TimeOfDay:
		return time.Duration(x) * time.Microsecond, nil
	case []any:
		out := make([]any, len(x))
		elem := pipeline.Column{Name: c.Name, Type: c.Elem}
		for i, e := range x {
			var err error
			if _, nested := e.([]any); nested {
				elem.Type, elem.Elem = pipeline.TypeArray, c.Elem
			}
			if out[i], err = ValueOf(&elem, e, image); err != nil {
				return nil, err
			}
			elem.Type = c.Elem
		}
		return out, nil
	}
	s, err := textform.Encode(c, v)
	if err != nil {
		return nil, &valueError{col: image + "." + c.Name, msg: err.Error()}
	}
	return s, nil
}

// typeName names a Go type as the expression docs do.
func typeName(t reflect.Type) string {
	switch t {
	case typeDecimal:
		return "decimal"
	case typeTime:
		return "time"
	case typeDuration:
		return "duration"
	case typeList:
		return "array"
	case typeBytes:
		return "bytes"
	}
	if t.Kind() == reflect.Interface {
		return "any"
	}
	return t.String()
}

// TypeName names a Go type as the expression docs do.
func TypeName(t reflect.Type) string { return typeName(t) }

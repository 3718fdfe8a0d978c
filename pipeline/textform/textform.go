// Package textform is the text form of record values that sinks storing
// text use (the Redis sink for every value, the DuckDB sink for the
// multi-dimensional arrays its LIST columns cannot hold): Encode and
// Decode give every value back exactly.
//
//	bool               true | false
//	integers           decimal
//	floats             shortest round-trip form; NaN, Infinity, -Infinity
//	decimal            exact plain text with its scale (12.50); NaN, Infinity, -Infinity
//	string, text, enum, set, inet, macaddr   as is
//	json               the document text
//	bytes, bit, geometry                     standard base64
//	uuid               8-4-4-4-12 lower-case hex
//	date               2006-01-02; infinity, -infinity
//	time               15:04:05.000000 (24:00:00.000000 allowed)
//	timetz             15:04:05.000000+05:30 (seconds appended when not 0)
//	timestamptz        RFC 3339 in UTC with microseconds: 2006-01-02T15:04:05.000000Z
//	timestamp          the same without zone: 2006-01-02T15:04:05.000000
//	interval           P<months>M<days>DT<seconds>S, e.g. P-14M3DT-1.500000S
//	array              JSON text: null, booleans and integers as JSON values,
//	                   nested arrays nested, other elements as JSON strings of
//	                   their encoding above
package textform

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
)

const (
	tsLayout   = "2006-01-02T15:04:05.000000Z"
	wallLayout = "2006-01-02T15:04:05.000000"
	dateLayout = "2006-01-02"
)

// Encode renders v, a non-nil value of column c, in its text form.
func Encode(c *pipeline.Column, v any) (string, error) {
	return encodeScalar(c.Type, c.Elem, v)
}

func encodeScalar(t, elem pipeline.Type, v any) (string, error) {
	switch x := v.(type) {
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		return formatFloat(x), nil
	case pipeline.Decimal:
		return x.String(), nil
	case string:
		return x, nil
	case pipeline.JSON:
		return string(x), nil
	case []byte:
		return base64.StdEncoding.EncodeToString(x), nil
	case pipeline.UUID:
		return x.String(), nil
	case pipeline.Date:
		if x.Special != pipeline.Finite {
			return x.Special.String(), nil
		}
		return x.Time().Format(dateLayout), nil
	case pipeline.TimeOfDay:
		return x.String(), nil
	case pipeline.TimeTZ:
		return pipeline.FormatTimeTZ(x), nil
	case pipeline.Timestamp:
		if x.Special != pipeline.Finite {
			return x.Special.String(), nil
		}
		if t == pipeline.TypeTimestamp {
			return x.Time().Format(wallLayout), nil
		}
		return x.Time().Format(tsLayout), nil
	case pipeline.Interval:
		return pipeline.FormatInterval(x), nil
	case []any:
		var b bytes.Buffer
		if err := appendArray(&b, elem, x); err != nil {
			return "", err
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("unsupported value %T for a %s column", v, t)
}

func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// appendArray writes an array as JSON: bools and integers as JSON values,
// NULL as null, nested arrays nested, every other element as a JSON string
// of its scalar encoding.
func appendArray(b *bytes.Buffer, elem pipeline.Type, a []any) error {
	b.WriteByte('[')
	for i, e := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		switch x := e.(type) {
		case nil:
			b.WriteString("null")
		case bool:
			b.WriteString(strconv.FormatBool(x))
		case int64:
			b.WriteString(strconv.FormatInt(x, 10))
		case uint64:
			b.WriteString(strconv.FormatUint(x, 10))
		case []any:
			if err := appendArray(b, elem, x); err != nil {
				return err
			}
		default:
			s, err := encodeScalar(elem, pipeline.TypeText, e)
			if err != nil {
				return err
			}
			q, _ := json.Marshal(s)
			b.Write(q)
		}
	}
	b.WriteByte(']')
	return nil
}

// Decode reads the text form of a value of column c back into the record
// model's value type.
func Decode(c *pipeline.Column, s string) (any, error) {
	if c.Type == pipeline.TypeArray {
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		var raw any
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("column %s: array %q: %w", c.Name, s, err)
		}
		return decodeArray(c.Elem, raw)
	}
	v, err := decodeScalar(c.Type, s)
	if err != nil {
		return nil, fmt.Errorf("column %s: %w", c.Name, err)
	}
	return v, nil
}

func decodeArray(elem pipeline.Type, raw any) (any, error) {
	arr, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("array: want a JSON array, got %T", raw)
	}
	out := make([]any, len(arr))
	for i, e := range arr {
		var err error
		switch x := e.(type) {
		case nil:
		case []any:
			out[i], err = decodeArray(elem, x)
		case bool:
			out[i] = x
		case json.Number:
			out[i], err = decodeScalar(elem, x.String())
		case string:
			out[i], err = decodeScalar(elem, x)
		default:
			err = fmt.Errorf("array element %T", e)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decodeScalar(t pipeline.Type, s string) (any, error) {
	switch t {
	case pipeline.TypeBool:
		return strconv.ParseBool(s)
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		return strconv.ParseInt(s, 10, 64)
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		return strconv.ParseUint(s, 10, 64)
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		switch s {
		case "NaN":
			return math.NaN(), nil
		case "Infinity":
			return math.Inf(1), nil
		case "-Infinity":
			return math.Inf(-1), nil
		}
		return strconv.ParseFloat(s, 64)
	case pipeline.TypeDecimal:
		return pipeline.ParseDecimal(s)
	case pipeline.TypeJSON:
		return pipeline.JSON(s), nil
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return base64.StdEncoding.DecodeString(s)
	case pipeline.TypeUUID:
		return pipeline.ParseUUID(s)
	case pipeline.TypeDate:
		if sp, ok := pipeline.ParseSpecial(s); ok && sp != pipeline.NaN {
			return pipeline.Date{Special: sp}, nil
		}
		tm, err := pipeline.ParseTime(dateLayout, s)
		if err != nil {
			return nil, err
		}
		return pipeline.DateOf(tm), nil
	case pipeline.TypeTime:
		return pipeline.ParseTimeOfDay(s)
	case pipeline.TypeTimeTZ:
		return pipeline.ParseTimeTZ(s)
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		if sp, ok := pipeline.ParseSpecial(s); ok && sp != pipeline.NaN {
			return pipeline.Timestamp{Special: sp}, nil
		}
		layout := tsLayout
		if t == pipeline.TypeTimestamp {
			layout = wallLayout
		}
		tm, err := pipeline.ParseTime(layout, s)
		if err != nil {
			return nil, err
		}
		return pipeline.TimestampOf(tm), nil
	case pipeline.TypeInterval:
		return pipeline.ParseInterval(s)
	}
	// TypeText, TypeString, TypeEnum, TypeSet, TypeInet, TypeMacaddr.
	return s, nil
}

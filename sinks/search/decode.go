package search

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// decodeColumn reads a column's stored JSON value back into the record
// model's value type (the inverse of stage).
func decodeColumn(c *pipeline.Column, raw json.RawMessage) (any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var v any
	var err error
	switch c.Type {
	case pipeline.TypeJSON:
		return pipeline.JSON(upsert.UnwrapJSON(raw)), nil
	case pipeline.TypeArray:
		var x any
		if x, err = decodeJSON(raw); err == nil {
			v, err = decodeArray(c.Elem, x)
		}
	default:
		var x any
		if x, err = decodeJSON(raw); err == nil {
			v, err = decodeScalar(c.Type, x)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("column %s: %w", c.Name, err)
	}
	return v, nil
}

func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var x any
	err := dec.Decode(&x)
	return x, err
}

func decodeArray(elem pipeline.Type, x any) (any, error) {
	arr, ok := x.([]any)
	if !ok {
		return nil, fmt.Errorf("array: want a JSON array, got %T", x)
	}
	out := make([]any, len(arr))
	for i, e := range arr {
		var err error
		switch y := e.(type) {
		case nil:
		case []any:
			if elem == pipeline.TypeJSON {
				out[i], err = jsonElement(y)
				break
			}
			out[i], err = decodeArray(elem, y)
		default:
			if elem == pipeline.TypeJSON {
				out[i], err = jsonElement(y)
				break
			}
			out[i], err = decodeScalar(elem, y)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// jsonElement re-encodes a JSON element of an array of JSON documents (a
// nested array there is a document, not a dimension).
func jsonElement(x any) (any, error) {
	b, err := json.Marshal(x)
	return pipeline.JSON(b), err
}

// decodeScalar converts a decoded JSON scalar (bool, json.Number, string)
// to the value type of t.
func decodeScalar(t pipeline.Type, x any) (any, error) {
	if b, ok := x.(bool); ok {
		if t != pipeline.TypeBool {
			return nil, fmt.Errorf("boolean for a %s value", t)
		}
		return b, nil
	}
	if n, ok := x.(json.Number); ok {
		switch t {
		case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
			return strconv.ParseInt(n.String(), 10, 64)
		case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
			return strconv.ParseUint(n.String(), 10, 64)
		case pipeline.TypeFloat32, pipeline.TypeFloat64:
			return strconv.ParseFloat(n.String(), 64)
		}
		return nil, fmt.Errorf("number %s for a %s value", n, t)
	}
	s, ok := x.(string)
	if !ok {
		return nil, fmt.Errorf("unexpected %T for a %s value", x, t)
	}
	switch t {
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		switch s {
		case "NaN":
			return math.NaN(), nil
		case "Infinity":
			return math.Inf(1), nil
		case "-Infinity":
			return math.Inf(-1), nil
		}
		return nil, fmt.Errorf("float %q", s)
	case pipeline.TypeDecimal:
		return pipeline.ParseDecimal(s)
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
	case pipeline.TypeBool, pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64, pipeline.TypeUint8,
		pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		return nil, fmt.Errorf("string %q for a %s value", s, t)
	}
	// TypeText, TypeString, TypeEnum, TypeSet, TypeInet, TypeMacaddr.
	return s, nil
}

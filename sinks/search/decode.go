package search

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
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
		return pipeline.JSON(raw), nil
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
		return parseUUID(s)
	case pipeline.TypeDate:
		if sp, ok := special(s); ok {
			return pipeline.Date{Special: sp}, nil
		}
		tm, err := time.Parse(dateLayout, s)
		if err != nil {
			return nil, err
		}
		return pipeline.DateOf(tm), nil
	case pipeline.TypeTime:
		us, err := parseTimeOfDay(s)
		return pipeline.TimeOfDay(us), err
	case pipeline.TypeTimeTZ:
		return parseTimeTZ(s)
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		if sp, ok := special(s); ok {
			return pipeline.Timestamp{Special: sp}, nil
		}
		layout := tsLayout
		if t == pipeline.TypeTimestamp {
			layout = wallLayout
		}
		tm, err := time.Parse(layout, s)
		if err != nil {
			return nil, err
		}
		return pipeline.TimestampOf(tm), nil
	case pipeline.TypeInterval:
		return parseInterval(s)
	case pipeline.TypeBool, pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64, pipeline.TypeUint8,
		pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		return nil, fmt.Errorf("string %q for a %s value", s, t)
	}
	// TypeText, TypeString, TypeEnum, TypeSet, TypeInet, TypeMacaddr.
	return s, nil
}

func special(s string) (pipeline.Special, bool) {
	switch s {
	case "infinity":
		return pipeline.PosInfinity, true
	case "-infinity":
		return pipeline.NegInfinity, true
	}
	return pipeline.Finite, false
}

// parseTimeOfDay reads HH:MM:SS.ffffff.
func parseTimeOfDay(s string) (int64, error) {
	var h, m, sec, us int64
	if _, err := fmt.Sscanf(s, "%d:%d:%d.%d", &h, &m, &sec, &us); err != nil || len(s) != 15 {
		return 0, fmt.Errorf("time %q: want HH:MM:SS.ffffff", s)
	}
	return ((h*60+m)*60+sec)*1e6 + us, nil
}

// parseTimeTZ reads HH:MM:SS.ffffff±HH:MM[:SS].
func parseTimeTZ(s string) (pipeline.TimeTZ, error) {
	if len(s) < 16 {
		return pipeline.TimeTZ{}, fmt.Errorf("timetz %q", s)
	}
	us, err := parseTimeOfDay(s[:15])
	if err != nil {
		return pipeline.TimeTZ{}, err
	}
	sign, off := s[15], s[16:]
	var parts [3]int32
	for j, p := range strings.Split(off, ":") {
		n, err := strconv.Atoi(p)
		if err != nil || j > 2 {
			return pipeline.TimeTZ{}, fmt.Errorf("timetz %q: bad offset", s)
		}
		parts[j] = int32(n)
	}
	sec := parts[0]*3600 + parts[1]*60 + parts[2]
	switch sign {
	case '-':
		sec = -sec
	case '+':
	default:
		return pipeline.TimeTZ{}, fmt.Errorf("timetz %q: bad offset", s)
	}
	return pipeline.TimeTZ{Micros: us, OffsetSec: sec}, nil
}

// parseInterval reads P<months>M<days>DT<seconds>S.
func parseInterval(s string) (pipeline.Interval, error) {
	bad := fmt.Errorf("interval %q: want P<months>M<days>DT<seconds>S", s)
	if !strings.HasPrefix(s, "P") || !strings.HasSuffix(s, "S") {
		return pipeline.Interval{}, bad
	}
	body := s[1 : len(s)-1]
	mi := strings.IndexByte(body, 'M')
	di := strings.Index(body, "DT")
	if mi < 0 || di < mi {
		return pipeline.Interval{}, bad
	}
	months, err1 := strconv.ParseInt(body[:mi], 10, 32)
	days, err2 := strconv.ParseInt(body[mi+1:di], 10, 32)
	secs := body[di+2:]
	neg := strings.HasPrefix(secs, "-")
	whole, frac, _ := strings.Cut(strings.TrimPrefix(secs, "-"), ".")
	w, err3 := strconv.ParseInt(whole, 10, 64)
	f, err4 := strconv.ParseInt(frac, 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil || len(frac) != 6 {
		return pipeline.Interval{}, bad
	}
	us := w*1e6 + f
	if neg {
		us = -us
	}
	return pipeline.Interval{Months: int32(months), Days: int32(days), Micros: us}, nil
}

func parseUUID(s string) (pipeline.UUID, error) {
	var u pipeline.UUID
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 {
		return u, fmt.Errorf("uuid %q", s)
	}
	for i := range u {
		n, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return u, fmt.Errorf("uuid %q", s)
		}
		u[i] = byte(n)
	}
	return u, nil
}

package bleve

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// errValue marks a value the sink cannot store; its record fails
// permanently and is dead-lettered (Invariant 7).
var errValue = errors.New("value not storable in the search index")

func valueErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errValue, fmt.Sprintf(format, args...))
}

const (
	dayMicros   = 86400_000_000
	tsLayout    = "2006-01-02T15:04:05.000000"
	dateLayout  = "2006-01-02"
	minTextYear = 1
	maxTextYear = 9999
)

// appendValue appends the stored JSON form of v, a value of type t (with
// element type elem for arrays), to b. The forms are listed in doc.go; each
// is decodable back to the same record-model value by decodeValue.
func appendValue(b []byte, t, elem pipeline.Type, v any) ([]byte, error) {
	if v == nil {
		return append(b, "null"...), nil
	}
	if t != pipeline.TypeArray {
		return appendScalar(b, t, v, false)
	}
	list, ok := v.([]any)
	if !ok {
		return b, valueErr("array value is %T", v)
	}
	return appendArray(b, elem, list)
}

func appendArray(b []byte, elem pipeline.Type, list []any) ([]byte, error) {
	b = append(b, '[')
	for i, e := range list {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		switch x := e.(type) {
		case nil:
			b = append(b, "null"...)
		case []any:
			b, err = appendArray(b, elem, x)
		default:
			b, err = appendScalar(b, elem, x, true)
		}
		if err != nil {
			return b, err
		}
	}
	return append(b, ']'), nil
}

// appendScalar appends one non-NULL value. Inside arrays (inArray) a JSON
// document is a JSON string, so that it cannot be mistaken for a nested
// array.
func appendScalar(b []byte, t pipeline.Type, v any, inArray bool) ([]byte, error) {
	mismatch := func() ([]byte, error) { return b, valueErr("%s value is %T", t, v) }
	switch t {
	case pipeline.TypeBool:
		x, ok := v.(bool)
		if !ok {
			return mismatch()
		}
		return strconv.AppendBool(b, x), nil
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		x, ok := v.(int64)
		if !ok {
			return mismatch()
		}
		return strconv.AppendInt(b, x, 10), nil
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		x, ok := v.(uint64)
		if !ok {
			return mismatch()
		}
		return strconv.AppendUint(b, x, 10), nil
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		x, ok := v.(float64)
		if !ok {
			return mismatch()
		}
		switch {
		case math.IsNaN(x):
			return append(b, `"NaN"`...), nil
		case math.IsInf(x, 1):
			return append(b, `"Infinity"`...), nil
		case math.IsInf(x, -1):
			return append(b, `"-Infinity"`...), nil
		}
		return strconv.AppendFloat(b, x, 'g', -1, 64), nil
	case pipeline.TypeDecimal:
		x, ok := v.(pipeline.Decimal)
		if !ok {
			return mismatch()
		}
		return jsontext.AppendString(b, x.String()), nil
	case pipeline.TypeString, pipeline.TypeText, pipeline.TypeEnum, pipeline.TypeSet, pipeline.TypeInet, pipeline.TypeMacaddr:
		x, ok := v.(string)
		if !ok {
			return mismatch()
		}
		if !utf8.ValidString(x) {
			return b, valueErr("%s value is not valid UTF-8", t)
		}
		return jsontext.AppendString(b, x), nil
	case pipeline.TypeJSON:
		x, ok := v.(pipeline.JSON)
		if !ok {
			return mismatch()
		}
		if !json.Valid([]byte(x)) {
			return b, valueErr("json value is not valid JSON")
		}
		if inArray {
			return jsontext.AppendString(b, string(x)), nil
		}
		// upsert.JSONWrapKey keeps JSON's null apart from SQL NULL.
		return append(b, upsert.WrapJSON([]byte(strings.TrimSpace(string(x))))...), nil
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		x, ok := v.([]byte)
		if !ok {
			return mismatch()
		}
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, x)
		return append(b, '"'), nil
	case pipeline.TypeUUID:
		x, ok := v.(pipeline.UUID)
		if !ok {
			return mismatch()
		}
		return jsontext.AppendString(b, x.String()), nil
	case pipeline.TypeDate:
		x, ok := v.(pipeline.Date)
		if !ok {
			return mismatch()
		}
		if x.Special != pipeline.Finite {
			return appendSpecial(b, x.Special)
		}
		if y := x.Time().Year(); y < minTextYear || y > maxTextYear {
			return strconv.AppendInt(b, int64(x.Days), 10), nil
		}
		return jsontext.AppendString(b, x.Time().Format(dateLayout)), nil
	case pipeline.TypeTime:
		x, ok := v.(pipeline.TimeOfDay)
		if !ok {
			return mismatch()
		}
		if x < 0 || x > dayMicros {
			return b, valueErr("time of day %d µs out of range", int64(x))
		}
		return jsontext.AppendString(b, x.String()), nil
	case pipeline.TypeTimeTZ:
		x, ok := v.(pipeline.TimeTZ)
		if !ok {
			return mismatch()
		}
		if x.Micros < 0 || x.Micros > dayMicros {
			return b, valueErr("time of day %d µs out of range", x.Micros)
		}
		return jsontext.AppendString(b, pipeline.FormatTimeTZ(x)), nil
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		x, ok := v.(pipeline.Timestamp)
		if !ok {
			return mismatch()
		}
		if x.Special != pipeline.Finite {
			return appendSpecial(b, x.Special)
		}
		tm := x.Time()
		if y := tm.Year(); y < minTextYear || y > maxTextYear {
			return strconv.AppendInt(b, x.Micros, 10), nil
		}
		s := tm.Format(tsLayout)
		if t == pipeline.TypeTimestampTZ {
			s += "Z"
		}
		return jsontext.AppendString(b, s), nil
	case pipeline.TypeInterval:
		x, ok := v.(pipeline.Interval)
		if !ok {
			return mismatch()
		}
		b = append(b, `{"months":`...)
		b = strconv.AppendInt(b, int64(x.Months), 10)
		b = append(b, `,"days":`...)
		b = strconv.AppendInt(b, int64(x.Days), 10)
		b = append(b, `,"micros":`...)
		b = strconv.AppendInt(b, x.Micros, 10)
		return append(b, '}'), nil
	}
	return b, valueErr("unsupported column type %s", t)
}

func appendSpecial(b []byte, s pipeline.Special) ([]byte, error) {
	if s != pipeline.PosInfinity && s != pipeline.NegInfinity {
		return b, valueErr("%s is not a date or timestamp value", s)
	}
	return jsontext.AppendString(b, s.String()), nil
}

// decodeValue reads a stored JSON form back into the record-model value of
// type t (elem for arrays).
func decodeValue(t, elem pipeline.Type, raw []byte) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if t != pipeline.TypeArray {
		return decodeScalar(t, raw, false)
	}
	return decodeArray(elem, raw)
}

func decodeArray(elem pipeline.Type, raw []byte) (any, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, fmt.Errorf("array: %w", err)
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		p = bytes.TrimSpace(p)
		var err error
		switch {
		case string(p) == "null":
		case len(p) > 0 && p[0] == '[':
			out[i], err = decodeArray(elem, p)
		default:
			out[i], err = decodeScalar(elem, p, true)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decodeScalar(t pipeline.Type, raw []byte, inArray bool) (any, error) {
	str := func() (string, error) {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	quoted := len(raw) > 0 && raw[0] == '"'
	switch t {
	case pipeline.TypeBool:
		return strconv.ParseBool(string(raw))
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		return strconv.ParseInt(string(raw), 10, 64)
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		return strconv.ParseUint(string(raw), 10, 64)
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		if quoted {
			s, err := str()
			if err != nil {
				return nil, err
			}
			switch s {
			case "NaN":
				return math.NaN(), nil
			case "Infinity":
				return math.Inf(1), nil
			case "-Infinity":
				return math.Inf(-1), nil
			}
			return nil, fmt.Errorf("float %q", s)
		}
		return strconv.ParseFloat(string(raw), 64)
	case pipeline.TypeDecimal:
		s, err := str()
		if err != nil {
			return nil, err
		}
		return pipeline.ParseDecimal(s)
	case pipeline.TypeString, pipeline.TypeText, pipeline.TypeEnum, pipeline.TypeSet, pipeline.TypeInet, pipeline.TypeMacaddr:
		return str()
	case pipeline.TypeJSON:
		if inArray {
			s, err := str()
			return pipeline.JSON(s), err
		}
		return pipeline.JSON(upsert.UnwrapJSON(raw)), nil
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		s, err := str()
		if err != nil {
			return nil, err
		}
		return base64.StdEncoding.DecodeString(s)
	case pipeline.TypeUUID:
		s, err := str()
		if err != nil {
			return nil, err
		}
		return pipeline.ParseUUID(s)
	case pipeline.TypeDate:
		if !quoted {
			d, err := strconv.ParseInt(string(raw), 10, 32)
			return pipeline.Date{Days: int32(d)}, err
		}
		s, err := str()
		if err != nil {
			return nil, err
		}
		if sp, ok := pipeline.ParseSpecial(s); ok && sp != pipeline.NaN {
			return pipeline.Date{Special: sp}, nil
		}
		tm, err := pipeline.ParseTime(dateLayout, s)
		if err != nil {
			return nil, err
		}
		return pipeline.Date{Days: int32(tm.Unix() / 86400)}, nil
	case pipeline.TypeTime:
		s, err := str()
		if err != nil {
			return nil, err
		}
		return pipeline.ParseTimeOfDay(s)
	case pipeline.TypeTimeTZ:
		s, err := str()
		if err != nil {
			return nil, err
		}
		return pipeline.ParseTimeTZ(s)
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		if !quoted {
			us, err := strconv.ParseInt(string(raw), 10, 64)
			return pipeline.Timestamp{Micros: us}, err
		}
		s, err := str()
		if err != nil {
			return nil, err
		}
		if sp, ok := pipeline.ParseSpecial(s); ok && sp != pipeline.NaN {
			return pipeline.Timestamp{Special: sp}, nil
		}
		tm, err := pipeline.ParseTime(tsLayout, strings.TrimSuffix(s, "Z"))
		if err != nil {
			return nil, err
		}
		return pipeline.Timestamp{Micros: tm.UnixMicro()}, nil
	case pipeline.TypeInterval:
		var iv struct {
			Months int32 `json:"months"`
			Days   int32 `json:"days"`
			Micros int64 `json:"micros"`
		}
		err := json.Unmarshal(raw, &iv)
		return pipeline.Interval{Months: iv.Months, Days: iv.Days, Micros: iv.Micros}, err
	}
	return nil, fmt.Errorf("unsupported column type %s", t)
}

// keyText is a key value's text in document ids and search hit keys: a
// string as it is, any other value as its stored JSON form, unquoted when
// that is a JSON string. For one column type it is injective, as the fold
// key is (see stager.AppendKey).
func keyText(t, elem pipeline.Type, v any) (string, error) {
	switch x := v.(type) {
	case int64:
		if t != pipeline.TypeArray {
			return strconv.FormatInt(x, 10), nil
		}
	case string:
		if t != pipeline.TypeArray {
			if !utf8.ValidString(x) {
				return "", valueErr("key is not valid UTF-8")
			}
			return x, nil
		}
	}
	b, err := appendValue(nil, t, elem, v)
	if err != nil {
		return "", err
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	return string(b), nil
}

// appendIDPart appends one key value's part of a document id to id: '/'
// and the value's escaped key text. A document id is the table's prefix
// (tablePrefix) and the part of each key value in key order.
func appendIDPart(id []byte, c *pipeline.Column, v any) ([]byte, error) {
	k, err := keyText(c.Type, c.Elem, v)
	if err != nil {
		return id, err
	}
	return append(append(id, '/'), escape(k, false)...), nil
}

// valueKeyType is the column type keyText assumes for a fold key value of
// a sink-specific Go type (one type per Go type: the text stays injective).
func valueKeyType(x any) (pipeline.Type, bool) {
	switch x.(type) {
	case pipeline.UUID:
		return pipeline.TypeUUID, true
	case pipeline.Decimal:
		return pipeline.TypeDecimal, true
	case pipeline.Date:
		return pipeline.TypeDate, true
	case pipeline.Timestamp:
		return pipeline.TypeTimestampTZ, true
	case pipeline.TimeOfDay:
		return pipeline.TypeTime, true
	case pipeline.TimeTZ:
		return pipeline.TypeTimeTZ, true
	case pipeline.Interval:
		return pipeline.TypeInterval, true
	case pipeline.JSON:
		return pipeline.TypeJSON, true
	}
	return 0, false
}

// escape percent-encodes '%', '/' and, when dots is set, '.', so that
// names and key parts can be joined with those separators unambiguously.
func escape(s string, dots bool) string {
	if !strings.ContainsAny(s, "%/.") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == '/' || (dots && c == '.') {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// tablePrefix is the document id prefix of a table's rows:
// escaped schema "." escaped table.
func tablePrefix(id pipeline.TableID) string {
	return escape(id.Schema, true) + "." + escape(id.Table, true)
}

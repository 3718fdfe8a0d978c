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
	"time"
	"unicode/utf8"

	"github.com/sluice-cdc/sluice/pipeline"
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
		return appendString(b, x.String()), nil
	case pipeline.TypeString, pipeline.TypeText, pipeline.TypeEnum, pipeline.TypeSet, pipeline.TypeInet, pipeline.TypeMacaddr:
		x, ok := v.(string)
		if !ok {
			return mismatch()
		}
		if !utf8.ValidString(x) {
			return b, valueErr("%s value is not valid UTF-8", t)
		}
		return appendString(b, x), nil
	case pipeline.TypeJSON:
		x, ok := v.(pipeline.JSON)
		if !ok {
			return mismatch()
		}
		if !json.Valid([]byte(x)) {
			return b, valueErr("json value is not valid JSON")
		}
		if inArray {
			return appendString(b, string(x)), nil
		}
		return append(b, strings.TrimSpace(string(x))...), nil
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
		return appendString(b, x.String()), nil
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
		return appendString(b, x.Time().Format(dateLayout)), nil
	case pipeline.TypeTime:
		x, ok := v.(pipeline.TimeOfDay)
		if !ok {
			return mismatch()
		}
		if x < 0 || x > dayMicros {
			return b, valueErr("time of day %d µs out of range", int64(x))
		}
		return appendString(b, x.String()), nil
	case pipeline.TypeTimeTZ:
		x, ok := v.(pipeline.TimeTZ)
		if !ok {
			return mismatch()
		}
		if x.Micros < 0 || x.Micros > dayMicros {
			return b, valueErr("time of day %d µs out of range", x.Micros)
		}
		return appendString(b, timeTZText(x)), nil
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
		return appendString(b, s), nil
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
	return appendString(b, s.String()), nil
}

func timeTZText(x pipeline.TimeTZ) string {
	off := x.OffsetSec
	sign := byte('+')
	if off < 0 {
		sign, off = '-', -off
	}
	s := fmt.Sprintf("%s%c%02d:%02d", pipeline.TimeOfDay(x.Micros), sign, off/3600, off/60%60)
	if off%60 != 0 {
		s += fmt.Sprintf(":%02d", off%60)
	}
	return s
}

// appendString appends s as a JSON string (s is valid UTF-8; nothing is
// HTML-escaped).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
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
		return pipeline.JSON(raw), nil
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
		return parseUUID(s)
	case pipeline.TypeDate:
		if !quoted {
			d, err := strconv.ParseInt(string(raw), 10, 32)
			return pipeline.Date{Days: int32(d)}, err
		}
		s, err := str()
		if err != nil {
			return nil, err
		}
		if sp, ok := special(s); ok {
			return pipeline.Date{Special: sp}, nil
		}
		tm, err := time.Parse(dateLayout, s)
		if err != nil {
			return nil, err
		}
		return pipeline.Date{Days: int32(tm.Unix() / 86400)}, nil
	case pipeline.TypeTime:
		s, err := str()
		if err != nil {
			return nil, err
		}
		us, err := parseTimeOfDay(s)
		return pipeline.TimeOfDay(us), err
	case pipeline.TypeTimeTZ:
		s, err := str()
		if err != nil {
			return nil, err
		}
		return parseTimeTZ(s)
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		if !quoted {
			us, err := strconv.ParseInt(string(raw), 10, 64)
			return pipeline.Timestamp{Micros: us}, err
		}
		s, err := str()
		if err != nil {
			return nil, err
		}
		if sp, ok := special(s); ok {
			return pipeline.Timestamp{Special: sp}, nil
		}
		tm, err := time.Parse(tsLayout, strings.TrimSuffix(s, "Z"))
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

func special(s string) (pipeline.Special, bool) {
	switch s {
	case "infinity":
		return pipeline.PosInfinity, true
	case "-infinity":
		return pipeline.NegInfinity, true
	}
	return pipeline.Finite, false
}

func parseUUID(s string) (pipeline.UUID, error) {
	var u pipeline.UUID
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 {
		return u, fmt.Errorf("uuid %q", s)
	}
	for i := range u {
		x, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return u, fmt.Errorf("uuid %q", s)
		}
		u[i] = byte(x)
	}
	return u, nil
}

// parseTimeOfDay reads HH:MM:SS.ffffff.
func parseTimeOfDay(s string) (int64, error) {
	var h, m, sec, frac int64
	if len(s) != 15 || s[2] != ':' || s[5] != ':' || s[8] != '.' {
		return 0, fmt.Errorf("time of day %q", s)
	}
	for _, p := range []struct {
		dst  *int64
		text string
	}{{&h, s[0:2]}, {&m, s[3:5]}, {&sec, s[6:8]}, {&frac, s[9:15]}} {
		x, err := strconv.ParseInt(p.text, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("time of day %q", s)
		}
		*p.dst = x
	}
	return h*3600e6 + m*60e6 + sec*1e6 + frac, nil
}

func parseTimeTZ(s string) (pipeline.TimeTZ, error) {
	if len(s) < 21 {
		return pipeline.TimeTZ{}, fmt.Errorf("timetz %q", s)
	}
	us, err := parseTimeOfDay(s[:15])
	if err != nil {
		return pipeline.TimeTZ{}, err
	}
	sign := int32(1)
	if s[15] == '-' {
		sign = -1
	}
	var off int32
	for i, part := range strings.Split(s[16:], ":") {
		x, err := strconv.ParseInt(part, 10, 32)
		if err != nil || i > 2 {
			return pipeline.TimeTZ{}, fmt.Errorf("timetz %q", s)
		}
		off += int32(x) * [3]int32{3600, 60, 1}[i]
	}
	return pipeline.TimeTZ{Micros: us, OffsetSec: sign * off}, nil
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

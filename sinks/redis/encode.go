package redis

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

// Value encodings: every non-NULL value is stored as a string, the same
// text in a hash field (Format "hash") and in a JSON string member (Format
// "json"). See the package documentation for the table.

const (
	tsLayout   = "2006-01-02T15:04:05.000000Z"
	wallLayout = "2006-01-02T15:04:05.000000"
	dateLayout = "2006-01-02"
)

// encodeValue renders v, a value of column c, in its stored text form.
func encodeValue(c *pipeline.Column, v any) (string, error) {
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
		return pipeline.TimeOfDay(x.Micros).String() + formatOffset(x.OffsetSec), nil
	case pipeline.Timestamp:
		if x.Special != pipeline.Finite {
			return x.Special.String(), nil
		}
		if t == pipeline.TypeTimestamp {
			return x.Time().Format(wallLayout), nil
		}
		return x.Time().Format(tsLayout), nil
	case pipeline.Interval:
		return fmt.Sprintf("P%dM%dDT%sS", x.Months, x.Days, formatMicros(x.Micros)), nil
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

func formatOffset(sec int32) string {
	sign := '+'
	if sec < 0 {
		sign, sec = '-', -sec
	}
	s := fmt.Sprintf("%c%02d:%02d", sign, sec/3600, sec/60%60)
	if sec%60 != 0 {
		s += fmt.Sprintf(":%02d", sec%60)
	}
	return s
}

func formatMicros(us int64) string {
	sign := ""
	if us < 0 {
		sign, us = "-", -us
	}
	return fmt.Sprintf("%s%d.%06d", sign, us/1e6, us%1e6)
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

// decodeValue reads the stored text of a column back into the record
// model's value type.
func decodeValue(c *pipeline.Column, s string) (any, error) {
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
		i := strings.LastIndexAny(s, "+-")
		if i < 0 {
			return nil, fmt.Errorf("timetz %q: no offset", s)
		}
		us, err := parseTimeOfDay(s[:i])
		if err != nil {
			return nil, err
		}
		var h, m, sec int32
		parts := strings.Split(s[i+1:], ":")
		for j, p := range parts {
			n, err := strconv.Atoi(p)
			if err != nil || j > 2 {
				return nil, fmt.Errorf("timetz %q: bad offset", s)
			}
			*[]*int32{&h, &m, &sec}[j] = int32(n)
		}
		off := h*3600 + m*60 + sec
		if s[i] == '-' {
			off = -off
		}
		return pipeline.TimeTZ{Micros: us, OffsetSec: off}, nil
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
	case "NaN":
		return pipeline.NaN, true
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
	secs = strings.TrimPrefix(secs, "-")
	whole, frac, _ := strings.Cut(secs, ".")
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

// escapeKeyPart escapes '\' and ':' in one key value of {pk}.
func escapeKeyPart(s string) string {
	if !strings.ContainsAny(s, `\:`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' || s[i] == ':' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// globEscape escapes the characters SCAN MATCH patterns treat specially.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

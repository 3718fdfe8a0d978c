package join

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
)

// A looked-up row is embedded as a JSON object of its columns. The forms
// are the ones search engines and JSON readers take without a mapping
// hint: numbers (decimals with their exact digits) as JSON numbers,
// timestamps as ISO 8601 (with Z when they are instants), dates as
// YYYY-MM-DD, bytes as base64, JSON columns embedded as they are, arrays
// as arrays. Values JSON has no number for (NaN, infinities) and the
// special dates and timestamps are strings ("NaN", "infinity").

const (
	instantLayout = "2006-01-02T15:04:05.999999Z"
	wallLayout    = "2006-01-02T15:04:05.999999"
)

// renderRow renders cols of e as a JSON object; a column e lacks (a row
// stored before the column was added) takes the column's Missing value.
func renderRow(cols []pipeline.Column, e *entry) pipeline.JSON {
	return pipeline.JSON(appendRow(make([]byte, 0, 64*len(cols)), cols, e))
}

// appendRow appends renderRow's object to b.
func appendRow(b []byte, cols []pipeline.Column, e *entry) []byte {
	b = append(b, '{')
	for i := range cols {
		c := &cols[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(jsontext.AppendString(b, validText(c.Name)), ':')
		v, ok := e.value(c.Name)
		if !ok {
			v = c.Missing
		}
		b = appendJSON(b, c.Type, c.Elem, v)
	}
	return append(b, '}')
}

func appendJSON(b []byte, t, elem pipeline.Type, v any) []byte {
	switch x := v.(type) {
	case nil, pipeline.Unchanged:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case uint64:
		return strconv.AppendUint(b, x, 10)
	case float64:
		switch {
		case math.IsNaN(x):
			return append(b, `"NaN"`...)
		case math.IsInf(x, 1):
			return append(b, `"Infinity"`...)
		case math.IsInf(x, -1):
			return append(b, `"-Infinity"`...)
		}
		return strconv.AppendFloat(b, x, 'g', -1, 64)
	case pipeline.Decimal:
		if x.Special != pipeline.Finite {
			return jsontext.AppendString(b, x.String())
		}
		return append(b, x.String()...)
	case string:
		return jsontext.AppendString(b, validText(x))
	case pipeline.JSON:
		if s := strings.TrimSpace(string(x)); json.Valid([]byte(s)) {
			return append(b, s...)
		}
		return jsontext.AppendString(b, validText(string(x)))
	case []byte:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, x)
		return append(b, '"')
	case pipeline.UUID:
		return jsontext.AppendString(b, x.String())
	case pipeline.Date:
		return jsontext.AppendString(b, x.String())
	case pipeline.TimeOfDay:
		return jsontext.AppendString(b, x.String())
	case pipeline.TimeTZ:
		return jsontext.AppendString(b, pipeline.FormatTimeTZ(x))
	case pipeline.Timestamp:
		if x.Special != pipeline.Finite {
			return jsontext.AppendString(b, x.String())
		}
		layout := wallLayout
		if t == pipeline.TypeTimestampTZ || t == pipeline.TypeArray && elem == pipeline.TypeTimestampTZ {
			layout = instantLayout
		}
		b = append(b, '"')
		b = x.Time().AppendFormat(b, layout)
		return append(b, '"')
	case pipeline.Interval:
		return jsontext.AppendString(b, pipeline.FormatInterval(x))
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, t, elem, e)
		}
		return append(b, ']')
	}
	return append(b, "null"...)
}

// validText replaces bytes that are not UTF-8 with U+FFFD: JSON text
// cannot hold them. Sources convert text to UTF-8, so this only meets
// text a source could not convert.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

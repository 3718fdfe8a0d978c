package search

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// Staging values (upsert.Converter): every record-model value becomes one
// of nil, bool, int64, uint64, float64, string (a JSON string member) or
// json.RawMessage (embedded JSON: JSON columns, arrays). See the package
// documentation for the table.

const (
	tsLayout   = "2006-01-02T15:04:05.000000Z"
	wallLayout = "2006-01-02T15:04:05.000000"
	dateLayout = "2006-01-02"
)

// errInvalid marks values the sink cannot hold (permanent).
var errInvalid = errors.New("search sink")

type conv struct{}

func (conv) Invalid(msg string) error { return fmt.Errorf("%w: %s", errInvalid, msg) }

// AppendKey encodes json.RawMessage keys (tag 200, length, bytes), the one
// staging type the upsert package does not know.
func (conv) AppendKey(b []byte, x any) ([]byte, bool) {
	if r, ok := x.(json.RawMessage); ok {
		return append(binary.AppendUvarint(append(b, 200), uint64(len(r))), r...), true
	}
	return b, false
}

func (c conv) Stage(col *pipeline.Column, v any) (any, error) {
	x, err := stage(col.Type, col.Elem, v)
	if err != nil {
		return nil, c.Invalid(fmt.Sprintf("column %s: %v", col.Name, err))
	}
	return x, nil
}

func stage(t, elem pipeline.Type, v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, int64, uint64, float64:
		return x, nil
	case string:
		if !utf8.ValidString(x) {
			return nil, errors.New("text is not valid UTF-8")
		}
		return x, nil
	case pipeline.JSON:
		if !json.Valid([]byte(x)) {
			return nil, errors.New("invalid JSON document")
		}
		// upsert.JSONWrapKey keeps JSON's null apart from SQL NULL.
		return json.RawMessage(upsert.WrapJSON(bytes.TrimSpace([]byte(x)))), nil
	case []any:
		b, err := appendArray(nil, elem, x)
		if err != nil {
			return nil, err
		}
		return json.RawMessage(b), nil
	}
	s, err := scalarText(t, v)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// scalarText renders the values stored as JSON strings.
func scalarText(t pipeline.Type, v any) (string, error) {
	switch x := v.(type) {
	case pipeline.Decimal:
		return x.String(), nil
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
	}
	return "", fmt.Errorf("unsupported value %T for a %s column", v, t)
}

// appendArray writes an array as a JSON array of its elements' staged
// forms (NULL elements as null, nested arrays nested).
func appendArray(b []byte, elem pipeline.Type, a []any) ([]byte, error) {
	b = append(b, '[')
	for i, e := range a {
		if i > 0 {
			b = append(b, ',')
		}
		if sub, ok := e.([]any); ok {
			var err error
			if b, err = appendArray(b, elem, sub); err != nil {
				return nil, err
			}
			continue
		}
		x, err := stage(elem, pipeline.TypeText, e)
		if err != nil {
			return nil, err
		}
		b = appendValue(b, x)
	}
	return append(b, ']'), nil
}

// appendValue appends the JSON form of a staging value.
func appendValue(b []byte, x any) []byte {
	switch v := x.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, v)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case uint64:
		return strconv.AppendUint(b, v, 10)
	case float64:
		switch {
		case math.IsNaN(v):
			return append(b, `"NaN"`...)
		case math.IsInf(v, 1):
			return append(b, `"Infinity"`...)
		case math.IsInf(v, -1):
			return append(b, `"-Infinity"`...)
		}
		return strconv.AppendFloat(b, v, 'g', -1, 64)
	case string:
		return jsontext.AppendString(b, v)
	case json.RawMessage:
		return append(b, v...)
	}
	return append(b, "null"...) // not a staging type; stage never returns one
}

// maxIDBytes is the engines' limit on a document id.
const maxIDBytes = 512

// docID is the document id of a row: the key values in key order, joined
// by ':', each in its text form (strings as they are, numbers in decimal,
// other values as their stored JSON text) with '\' and ':' escaped by a
// preceding '\'. The empty id (one empty string key) is `\e`; an id longer
// than 512 bytes is `\h` and the hex SHA-256 of the long form. Neither
// sequence occurs in an escaped id, so ids never collide.
func docID(keys []int, vals []any) string {
	var b []byte
	for i, j := range keys {
		if i > 0 {
			b = append(b, ':')
		}
		var part string
		switch x := vals[j].(type) {
		case string:
			part = x
		case int64:
			part = strconv.FormatInt(x, 10)
		case uint64:
			part = strconv.FormatUint(x, 10)
		default:
			part = string(appendValue(nil, x))
		}
		for k := 0; k < len(part); k++ {
			if part[k] == '\\' || part[k] == ':' {
				b = append(b, '\\')
			}
			b = append(b, part[k])
		}
	}
	switch {
	case len(b) == 0:
		return `\e`
	case len(b) > maxIDBytes:
		sum := sha256.Sum256(b)
		return `\h` + hex.EncodeToString(sum[:])
	}
	return string(b)
}

// formatTime is the _sluice_at form.
func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

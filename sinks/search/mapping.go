package search

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
)

// The sink's own document fields (reserved column names).
const (
	metaPrefix   = "_sluice_"
	fieldVersion = "_sluice_version" // keyword: the pipeline.Version as 64 hex digits
	fieldDeleted = "_sluice_deleted" // boolean: a tombstone
	fieldAt      = "_sluice_at"      // date: when the sink wrote the document
)

// metaProperties map the sink's own fields.
const metaProperties = `"` + fieldVersion + `":{"type":"keyword"},"` + fieldDeleted + `":{"type":"boolean"},"` +
	fieldAt + `":{"type":"date"}`

// indexName renders the template for a table and makes it a valid index
// name.
func indexName(template string, id pipeline.TableID) (string, error) {
	name := id.Name(template)
	return sanitizeIndex(name)
}

// sanitizeIndex lower-cases name and replaces the characters an index
// name may not hold (\ / * ? " < > | , # : space, control characters)
// with '_'; a leading '-', '_' or '+' is dropped. Names that stay invalid
// ("", ".", "..", longer than 255 bytes) are an error.
func sanitizeIndex(name string) (string, error) {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r < 0x20 || r == 0x7f || strings.ContainsRune(`\/*?"<>|,#: `, r):
			b.WriteByte('_')
		default:
			b.WriteRune(r)
		}
	}
	out := strings.TrimLeft(b.String(), "-_+")
	switch {
	case out == "" || out == "." || out == "..":
		return "", fmt.Errorf("index name %q is empty or a dot path after sanitizing", name)
	case len(out) > 255:
		return "", fmt.Errorf("index name %q is longer than 255 bytes", out)
	}
	return out, nil
}

// fieldMapping derives the mapping of one column. Key columns of string
// types are keyword (exact match); other strings are text with a keyword
// subfield. Numeric and date fields ignore malformed values (NaN,
// infinities, years the engine cannot index): the value stays in _source
// but is not searchable.
func fieldMapping(c *pipeline.Column, key, unsignedLong bool) string {
	t := c.Type
	if t == pipeline.TypeArray {
		t = c.Elem
	}
	switch t {
	case pipeline.TypeBool:
		return `{"type":"boolean"}`
	case pipeline.TypeInt16, pipeline.TypeUint8:
		return `{"type":"short"}`
	case pipeline.TypeInt32, pipeline.TypeUint16:
		return `{"type":"integer"}`
	case pipeline.TypeInt64, pipeline.TypeUint32:
		return `{"type":"long"}`
	case pipeline.TypeUint64:
		if unsignedLong {
			return `{"type":"unsigned_long"}`
		}
		return `{"type":"double"}`
	case pipeline.TypeFloat32:
		return `{"type":"float","ignore_malformed":true}`
	case pipeline.TypeFloat64, pipeline.TypeDecimal:
		return `{"type":"double","ignore_malformed":true}`
	case pipeline.TypeDate, pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		return `{"type":"date","ignore_malformed":true}`
	case pipeline.TypeJSON:
		if c.Fields != nil && c.Type == pipeline.TypeJSON {
			// A join's looked-up row: searchable by its members, the known
			// ones mapped like columns, members not known yet mapped
			// dynamically by the engine.
			fields := slices.Clone(c.Fields)
			slices.SortFunc(fields, func(a, b pipeline.Column) int { return strings.Compare(a.Name, b.Name) })
			b := []byte(`{"type":"object","properties":{`)
			for i := range fields {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(jsontext.AppendString(b, fields[i].Name), ':')
				b = append(b, fieldMapping(&fields[i], false, unsignedLong)...)
			}
			return string(append(b, "}}"...))
		}
		return `{"type":"object","enabled":false}`
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return `{"type":"binary"}`
	case pipeline.TypeString, pipeline.TypeText:
		if !key {
			return `{"type":"text","fields":{"keyword":{"type":"keyword","ignore_above":256}}}`
		}
	}
	// UUID, enum, set, inet, macaddr, time, timetz, interval, string keys.
	return `{"type":"keyword"}`
}

// properties returns the "properties" members for cols: the derived
// mappings, replaced field by field by the override's.
func properties(cols []pipeline.Column, isKey []bool, ov *override, unsignedLong bool) map[string]json.RawMessage {
	props := make(map[string]json.RawMessage, len(cols))
	for i := range cols {
		c := &cols[i]
		if ov != nil {
			if m, ok := ov.props[c.Name]; ok {
				props[c.Name] = m
				continue
			}
		}
		props[c.Name] = json.RawMessage(fieldMapping(c, isKey[i], unsignedLong))
	}
	return props
}

// mappingsBody renders a "mappings" object: the sink's fields, props and
// the override's other members.
func mappingsBody(props map[string]json.RawMessage, ov *override) []byte {
	b := []byte(`{"properties":{` + metaProperties)
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b = append(jsontext.AppendString(append(b, ','), n), ':')
		b = append(b, props[n]...)
	}
	b = append(b, '}')
	if ov != nil {
		keys := make([]string, 0, len(ov.other))
		for k := range ov.other {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b = append(jsontext.AppendString(append(b, ','), k), ':')
			b = append(b, ov.other[k]...)
		}
	}
	return append(b, '}')
}

// liveFilter is the query of documents a consumer sees: no tombstones and
// nothing below the truncate barrier (barrier "" for none).
func liveFilter(barrier string) []byte {
	b := []byte(`{"bool":{"must_not":[{"term":{"` + fieldDeleted + `":true}}]`)
	if barrier != "" {
		b = append(b, `,"filter":[{"range":{"`+fieldVersion+`":{"gte":"`+barrier+`"}}}]`...)
	}
	return append(b, `}}`...)
}

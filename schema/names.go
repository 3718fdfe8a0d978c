package schema

import (
	"strings"

	"github.com/hamba/avro/v2"
	"github.com/sluice-cdc/sluice/pipeline"
)

// SanitizeName turns s into a valid Avro name ([A-Za-z_][A-Za-z0-9_]*):
// every other character (including non-ASCII letters) becomes '_', and a
// leading digit or an empty name gets a '_' prefix. "order-id" → "order_id",
// "1st" → "_1st", "prénom" → "pr_nom". Distinct columns that sanitise to the
// same name make schema building fail rather than silently merge; a field
// whose name was changed carries the original in its sluice.column property.
func SanitizeName(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 1)
	for i, r := range s {
		switch {
		case r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z'):
			b.WriteRune(r)
		case r >= '0' && r <= '9':
			if i == 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// Namespace returns the Avro namespace of a table's records:
// <serverName>.<database>.<schema>.<table>, each component sanitised with
// SanitizeName and empty components (no server name, a source without a
// database level) left out.
func Namespace(serverName string, id pipeline.TableID) string {
	var parts []string
	for _, p := range []string{serverName, id.Database, id.Schema, id.Table} {
		if p == "" {
			continue
		}
		for _, q := range strings.Split(p, ".") {
			parts = append(parts, SanitizeName(q))
		}
	}
	return strings.Join(parts, ".")
}

// SubjectNameStrategy names the registry subject a schema is registered
// under, for a record written to topic as its key (isKey) or value.
type SubjectNameStrategy func(topic string, isKey bool, s avro.Schema) string

// TopicNameStrategy is Confluent's default: "<topic>-key" or "<topic>-value".
func TopicNameStrategy(topic string, isKey bool, _ avro.Schema) string {
	if isKey {
		return topic + "-key"
	}
	return topic + "-value"
}

// RecordNameStrategy names the subject after the record's full name (for
// example "dbserver1.shop.public.orders.Value"), independent of the topic.
// A schema that is not named (never the case for the schemas of this
// package) falls back to TopicNameStrategy.
func RecordNameStrategy(topic string, isKey bool, s avro.Schema) string {
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	return TopicNameStrategy(topic, isKey, s)
}

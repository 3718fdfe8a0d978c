// Package schema maps table shapes (pipeline.Table) to Avro schemas and
// encodes records in the Confluent wire format, for sinks that write to a
// Kafka-compatible log with a schema registry.
//
// Three record schemas exist per table shape, all in the namespace
// <ServerName>.<database>.<schema>.<table> (empty components are left out;
// every component is sanitised to Avro's name rules, see SanitizeName):
//
//   - Key: the key columns in key order (KeySchema, Codec.EncodeKey).
//   - Value: the row image plus the metadata fields __op, __version,
//     __deleted and __source_ts_ms — the flattened form Debezium's
//     ExtractNewRecordState transform produces (ValueSchema,
//     Codec.EncodeValue).
//   - Envelope: the Debezium change-event envelope with before, after,
//     source, op, ts_ms and transaction (EnvelopeSchema,
//     Codec.EncodeEnvelope). Its before/after records are named Value too
//     and hold the row image without the metadata fields.
//
// The column type mapping, the handling of NULL, unchanged TOAST values,
// infinities and NaN is documented on KeySchema and in README.md of this
// package. A Codec is built once per table shape: it compiles one writer per
// column and appends Avro binary straight from the record's typed values
// (no per-record maps; one allocation per encoded record). Decoding uses a
// frozen hamba configuration per shape, so two shapes of one table (which
// share record names) never share cached decoders; Cache keeps Codecs by
// *pipeline.Table.
//
// Frame and Unframe implement the Confluent framing (magic byte 0, 4-byte
// big-endian schema id, Avro binary). Registry is the schema-registry
// contract; MemRegistry implements it in memory for tests. SchemaText gives
// the schema JSON to register: it keeps defaults, logical types and custom
// properties, which a registry needs for its compatibility checks.
package schema

// Package search is the search-index sink: it keeps one OpenSearch or
// Elasticsearch index per captured table in step with the table's rows,
// idempotently (Invariant 4), through the engine's official Go client
// (opensearch-go for Kind "opensearch", go-elasticsearch for
// "elasticsearch"; the two differ only in the client, every other line is
// shared).
//
// # Indices
//
// A table's index is Options.IndexTemplate (default "{schema}.{table}")
// with {database}, {schema} and {table} replaced, lower-cased, with the
// characters an index name may not hold (\ / * ? " < > | , # : space)
// replaced by '_' and a leading '-', '_' or '+' dropped. Tables whose
// names differ only in case (or otherwise map to one name) would share an
// index: the sink refuses that with a Fatal error naming both tables. The sink creates an absent
// index with index.translog.durability=request, the mapping below and a
// filtered alias <index><AliasSuffix> (default "-live") that shows only
// live documents; it adds the columns of newer table shapes to the
// mapping (a column dropped from the table stays in the mapping). An
// existing index with async translog durability is refused (Fatal).
// Options.Mappings["schema.table"] overrides the mapping: its
// "properties" replace the derived field mappings field by field, its
// other members (dynamic, _source, dynamic_templates, …) are added; a
// mapping the engine refuses, at creation or for added columns, fails
// that table (below).
//
//	record model type                     document value                       mapping
//	bool                                  true | false                         boolean
//	int16, uint8                          number                               short
//	int32, uint16                         number                               integer
//	int64, uint32                         number                               long
//	uint64                                number                               unsigned_long (double on an
//	                                                                           Elasticsearch without the module)
//	float32 / float64                     number; "NaN", "Infinity", "-Infinity"  float / double, ignore_malformed
//	decimal                               exact string "12.50"; "NaN", "Infinity"  double, ignore_malformed
//	string, text                          string                               text + keyword subfield
//	                                                                           (keyword for key columns)
//	enum, set, inet, macaddr              string                               keyword
//	uuid                                  8-4-4-4-12 lower-case hex            keyword
//	json                                  the document embedded as JSON        object, enabled: false
//	bytes, bit, geometry                  standard base64                      binary
//	date                                  2006-01-02; infinity, -infinity      date, ignore_malformed
//	timestamp                             2006-01-02T15:04:05.000000           date, ignore_malformed
//	timestamptz                           2006-01-02T15:04:05.000000Z          date, ignore_malformed
//	time                                  15:04:05.000000                      keyword
//	timetz                                15:04:05.000000+05:30                keyword
//	interval                              P<months>M<days>DT<seconds>S         keyword
//	array                                 JSON array (NULL elements null,      the element's mapping
//	                                      nested arrays nested)
//
// Values a numeric or date field cannot index (NaN, infinities, years
// beyond the engine's range) are kept in _source, unsearchable, thanks to
// ignore_malformed. A JSON document "null" reads back as NULL.
//
// # Documents
//
// A row's document id is its key values in key order joined by ':', each
// in its text form (strings as they are, numbers in decimal, other values
// as their document JSON) with '\' and ':' escaped by a '\' (key
// ("a:b", 1) → "a\:b:1"); the empty id is `\e` and an id over 512 bytes
// becomes `\h` and its hex SHA-256. Besides one field per column (null for
// NULL) a document holds the sink's fields, so column names starting with
// "_sluice_" are refused:
//
//	_sluice_version   keyword  the pipeline.Version, 64 hex digits (string order = version order)
//	_sluice_deleted   boolean  true for a tombstone
//	_sluice_at        date     when the sink wrote the document
//
// # Versions and writes
//
// Every document is written with the bulk API and an external version
// (the layouts are in version.go: Postgres LSN << 12 | index within the
// transaction; MySQL epoch, binlog file, offset and row index; versions
// that saturate a field are compared exactly against the stored
// _sluice_version first and written with external_gte). Write folds the batch to the newest
// change per key (sinks/upsert), runs the batch's truncates, then sends
// the documents in bulk requests of at most BulkMaxBytes, two at a time,
// and returns nil only when every item was answered: with translog
// durability "request" the engine answers after fsyncing, so an answered
// write is durable. Refresh (for tests) only makes writes searchable at
// once; it adds nothing to durability. Invariant 4 is enforced as follows:
//
//   - a change whose version is not newer than the stored document's is
//     refused by the engine (HTTP 409), which the sink counts as done, so
//     replays, duplicates and late snapshot rows change nothing;
//   - a delete writes a versioned tombstone (the key's columns and
//     _sluice_deleted: true), so a late older record cannot bring the row
//     back (the engines forget a deleted document's version after
//     index.gc_deletes, 60s, which is why a real document is kept);
//   - tombstones written more than TombstoneTTL (default 168h) ago are
//     purged, at most once per min(TTL, 10m), in indices whose table has
//     had no snapshot record for TombstoneTTL either (so tombstones live
//     at least until the table's snapshot is over, then TombstoneTTL);
//     the TTL must exceed the longest replay horizon;
//   - a truncate is a versioned barrier: the highest truncate version is
//     kept in the state index (Options.StateIndex, default "sluice_state",
//     one document per index), records below it change nothing, the live
//     alias filters out documents below it and the documents below it are
//     deleted (a scroll and version-guarded bulk deletes; the reindex
//     module's delete-by-query is not needed).
//
// A change that leaves columns as they are (Unchanged TOAST values,
// columns missing from an older record shape) reads the stored document
// first (a realtime multi-get) and writes its values for those columns:
// the newest value an older change of the same key in the batch wrote
// when that is newer than the stored document, else the stored value,
// else NULL (a key not held, or a tombstone, which holds no values).
//
// Errors (refusal.go): a document the engine refuses
// (mapper_parsing_exception, document_parsing_exception,
// illegal_argument_exception, … : a bulk item answered 400) fails the
// batch's records of that key permanently in a *pipeline.BatchError whose
// error carries the engine's reason, so the runtime dead-letters them
// (Invariant 7) while the rest of the batch is durable; values the sink
// cannot encode fail their record the same way. A table the engine will
// not take — an index name or column name it cannot hold, a mapping it
// refuses at creation or for added columns (a broken override, a type
// clash, index.mapping.total_fields.limit), an index an operator closed
// (index_closed_exception) or blocked for writes (index.blocks.write,
// index.blocks.read_only) — fails the Write with a *pipeline.TableError,
// so the runtime quarantines that table in this sink and the other tables
// go on. A request refused as too large (413) is pipeline.TooLarge and an
// item or request refused with 429 for a full queue
// (es_rejected_execution_exception) pipeline.Overloaded: the runtime
// writes the records again in smaller pieces. The flood-stage disk
// watermark's read-only-allow-delete block (429), a 5xx, a missing index,
// the cluster's shard limit, a permission (401/403), a failed request, a
// lost connection and any other answer fail the whole batch for the
// runtime to retry. Invalid options, a Kind that does not match the server
// and an index with async translog durability are Fatal.
//
// Consumer contract: a document is a row when _sluice_deleted is false
// and _sluice_version is not below the index's barrier; the live alias
// and Sink.Scan (Rows) implement it. The sink must be the only writer of its
// indices and state index.
//
// # Options
//
//	kind                  Kind                "opensearch" | "elasticsearch" (required)
//	urls                  URLs                node URLs (required)
//	username, password    Username, Password  HTTP basic authentication
//	api_key               APIKey              Elasticsearch API key (base64 id:key)
//	tls.ca_file           CAFile              PEM CA bundle for https URLs
//	tls.insecure_skip_verify  InsecureSkipVerify  no certificate verification
//	index_template        IndexTemplate       default "{schema}.{table}"
//	mappings              Mappings            per "schema.table": a mappings JSON object
//	alias_suffix          AliasSuffix         default "-live"
//	state_index           StateIndex          default "sluice_state"
//	refresh               Refresh             refresh after every bulk (tests)
//	tombstone_ttl         TombstoneTTL        default 168h; negative keeps tombstones
//	bulk_max_bytes        BulkMaxBytes        default 8 MiB, at least 64 KiB
//	timeout               Timeout             per request, default 60s
package search

// Package bleve is the embedded search-index sink: it keeps a bleve
// (scorch) index directory in step with the captured tables, idempotently
// (Invariant 4), and answers full-text searches over it, with no server.
//
// # Options
//
//   - Name: the sink's name in logs ("bleve" when empty).
//   - Path: the index directory. Created when absent (an empty directory is
//     taken over); a non-empty directory that is not a bleve index is
//     refused. The index is built in a sibling ".<name>.creating" directory
//     and renamed into place, so a crash never leaves half an index.
//   - TombstoneTTL: how long deletes' tombstones are kept (see Tombstones);
//     zero or less keeps them forever.
//   - BatchMaxBytes: the largest estimated size of one bleve batch (default
//     32 MiB); a larger Write is applied as several batches.
//
// # One index for all tables
//
// Every table lives in the one index at Path. A Write is then one bleve
// batch (one durable step) whatever tables it touches, there is one writer
// lock to hold and one directory to search (`sluice search QUERY` spans all
// tables; SearchRequest.Table narrows it), and a new table needs no new
// index. A document's id is the table's prefix — schema and table name with
// '%', '/' and '.' percent-encoded, joined by '.' — then, for each key
// column, '/' and the key value's text with '%' and '/' percent-encoded: a
// string as it is, any other value as its stored form below, unquoted
// ("public.people/42", "shop.items/eu/7"). The TableID's Database is not
// part of it.
//
// # Documents
//
// Documents are built field by field from the table's columns (the index
// mapping only names the analyzers queries use):
//
//	string, text, enum, set, inet, macaddr, uuid, json, time, timetz
//	                 text, standard analyzer, with term vectors (phrases);
//	                 also indexed in the default field _all
//	integers, floats, decimals
//	                 numeric (float64; NaN and infinities not indexed);
//	                 searched by column ("qty:>5", "id:42"), not in _all,
//	                 like the types below
//	date, timestamp, timestamptz
//	                 datetime (UTC; ±infinity and instants outside
//	                 1677-2262, which bleve cannot represent, not indexed)
//	bool             the keyword true or false
//	bytes, bit, geometry, interval
//	                 not indexed
//	arrays           every element, as its element type
//
// A column named like an internal field (_id, _all, _table, _v, _deleted,
// _at, _key, _row) is indexed as "_c" + its name. Besides the columns every
// document holds _table ("schema.table", keyword), _v (the row's
// pipeline.Version as 64 hex digits, stored), _key (a JSON array of the key
// values, stored) and _row (a JSON object of every column, stored, not
// indexed) from which rows are read back exactly. Tombstones also hold
// _deleted ("true") and _at (when deleted, Unix milliseconds), both
// indexed, and no column fields. Live rows carry no _deleted or _at term:
// each term indexed for every row slows every write.
//
// Stored forms of values in _row and _key (JSON):
//
//	bool, integers   JSON booleans and numbers (exact: read with UseNumber)
//	floats           numbers, shortest round-trip form; "NaN", "Infinity", "-Infinity"
//	decimal          string, exact with its scale: "12.50"; "NaN", "Infinity", "-Infinity"
//	text types       strings (values must be valid UTF-8)
//	json             the document itself (it must be valid JSON); inside arrays a string
//	bytes, bit, geometry   standard base64 string
//	uuid             "8-4-4-4-12" lower-case hex
//	date             "2006-01-02"; days since 1970 (number) outside years 1-9999; "infinity", "-infinity"
//	time             "15:04:05.000000" (24:00:00 allowed)
//	timetz           "15:04:05.000000+05:30", seconds appended when not 0
//	timestamptz      "2006-01-02T15:04:05.000000Z"; microseconds (number) outside years 1-9999
//	timestamp        the same without "Z"
//	interval         {"months": m, "days": d, "micros": us}
//	array            array of the elements' forms, nested arrays nested
//
// # Writes
//
// Write folds the batch with package upsert (newest change per key,
// Unchanged and missing-column fallbacks), then, under the sink's mutex
// (bleve has one writer per process): for a truncate newer than the
// table's barrier, finds the table's documents below it; reads the stored
// _v (and, when a change keeps columns, _row) of each folded key through
// one index reader; drops changes not newer than the stored version —
// replays, duplicates, late snapshot rows, changes below the barrier — and
// builds the documents of the rest; then applies one bleve batch holding
// the new per-table state (barriers, columns, snapshot times; a bleve
// internal key), the truncate's removals and the documents. Guarantees
// (Invariant 4):
//
//   - a change whose version is not newer than the stored row's (live or
//     tombstone) changes nothing;
//   - a delete leaves a tombstone with the delete's version, so a late
//     snapshot row cannot resurrect the key; the tombstone keeps the row's
//     values, as an update leaving columns Unchanged after it would;
//   - a truncate stores its version as the table's barrier (never lowered)
//     and removes every document of the table below it in the same batch;
//     records below the barrier are ignored from then on. (A removed row
//     keeps nothing: the source cannot update a truncated row without
//     inserting it first.)
//   - an Unchanged value (unchanged TOAST), a column the record's shape
//     lacks and a column of the table the batch does not mention keep the
//     stored value (NULL for a key the index does not hold).
//
// # Durability
//
// scorch's Batch returns only after the batch is persisted, unless the
// index config sets unsafe_batch (or the index has no path). With
// unsafe_batch false, Batch waits on a channel the persister closes after
// persisting the root snapshot that holds the batch: the new segment file
// is written and fsynced, and the root.bolt transaction naming it is
// committed (bolt fsyncs on commit) and synced again; a persister error is
// returned by Batch. The sink opens the index with unsafe_batch false
// explicitly (overriding whatever the stored config says) and fsyncs the
// store directory after every batch, so the new file's directory entry is
// on disk too. TestWrittenBatchesSurviveKill kills a writer process with
// SIGKILL right after Write returned and finds every reported batch after
// reopening; with unsafe_batch true the same test loses the last batch.
// A killed process leaves the page cache behind, so that test proves that
// Write waits for the persister, not the fsyncs themselves (a power cut
// would). Segments that scorch's background merges create are not
// directory-synced by bleve; the sink cannot do it for them. A batch that fails after scorch introduced it in memory leaves
// the sink to reopen the index before the next Write, so that rows that
// are not on disk are never taken for stored ones.
//
// A Write larger than BatchMaxBytes is applied as several batches, each
// durable before the next starts (the state and a truncate's removals in
// the first). A crash in between leaves a prefix of the batch applied; the
// runtime retries the whole batch, which the version checks make
// harmless.
//
// # Tombstones
//
// Tombstones are purged, at most once per min(TombstoneTTL, 10m) after a
// Write, when they were written more than TombstoneTTL ago and no snapshot
// record (OpRead, or a record marked Snapshot) of their table was written
// in that time either: a table's tombstones are kept at least until its
// snapshot completes, and then TombstoneTTL longer. TombstoneTTL must
// exceed the longest replay horizon: a record older than a purged
// tombstone could bring its row back.
//
// # Rejected records
//
// bleve itself rejects none of the documents the sink builds (ids are
// never empty; values bleve cannot index in their field's type are stored
// only). A record fails permanently, through a *pipeline.BatchError so
// that the runtime dead-letters it (Invariant 7), when a value cannot be
// stored exactly: a string that is not valid UTF-8, a json value that is
// not valid JSON, a Go value of another type than its column's. The rest
// of the batch applies. A table shape with a column whose type differs
// from the one the index holds for it (stored values are not migrated)
// fails the Write before anything is applied, with a *pipeline.TableError:
// the runtime quarantines that table in this sink and the other tables go
// on. Any other failure (a full disk, an I/O error) fails the whole Write,
// which the runtime retries.
//
// # Searching
//
// Sink.Search serves searches on the open sink, concurrently with writes;
// the daemon exposes it over HTTP. The package-level Search opens the
// index read-only for a process that does not hold it (`sluice search`
// with no sluice running). The writer holds an exclusive lock on the
// index's root.bolt and a reader a shared one, so while a sluice runs the
// package-level Search fails with ErrLocked after waiting at most
// DefaultLockWait (or until ctx's deadline), and while a reader holds the
// index the sink's Open fails with ErrLocked (retryably) after a few
// seconds. Queries use bleve's query-string syntax; hits are live rows
// only, with their table, key, score and row (the stored forms above).
//
// A Sink is safe for concurrent use: Write calls are serialized; Search
// and Rows run alongside them; Close waits for both.
package bleve

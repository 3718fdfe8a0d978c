// Package redis is the cache sink: it keeps one Redis key per captured row,
// idempotently (Invariant 4).
//
// # Keys
//
// A row's key is Options.KeyTemplate (default "{schema}.{table}:{pk}") with
// {database}, {schema} and {table} replaced by the source table's names and
// {pk} by the key column values in key order, joined by ':', each encoded as
// below with '\' and ':' escaped by a preceding '\' (key ("a:b", 1) →
// "s.t:a\:b:1"). The template must end with a separator character and {pk};
// every row key of a table then starts with the same prefix P. The table's
// truncate barrier is the string key P minus its last character plus
// "#barrier" ("s.t#barrier" by default), which never collides with a row
// key (the separator may not be '#').
//
// # Stored form
//
// Every row key holds the row's version: the record's pipeline.Version in
// its compact text form (Version.Compact, about 13 bytes: a length digit
// then the hex digits of each component), whose byte order is version
// order; the table's barrier key holds the same form.
//
//   - Format "json" (default): a string, the row as a JSON object whose
//     first member is always "_v" (the version), then one member per column
//     (null for NULL): {"_v":"081a2b3c4d015","id":"1","name":"a","note":null}.
//     GET returns the row. A deleted row is the tombstone
//     {"_v":"<version>","_deleted":true}.
//   - Format "hash": a hash with the version in field _v and one field per
//     non-NULL column (NULL columns are absent); HGET reads one column. A
//     deleted row is a tombstone: _v and _deleted = "1", no data fields.
//     About half as fast to write as json: every key costs an HGET and an
//     HSET inside the script, where json reads and writes a whole call's
//     keys with one MGET and one MSET.
//
// Tombstones expire after TombstoneTTL (default 168h), but never before
// their table's snapshot is over: while a snapshot record of the table
// was written within TombstoneTTL (the time is kept in <base>#snapshot,
// base being the barrier key without "#barrier"), tombstones are written
// without expiry and listed in the sorted set <base>#held; once the
// snapshot is over, a sweep (at most every min(TombstoneTTL, 10m)) gives
// each the rest of its TombstoneTTL. The set sluice#<sink name>#snapshots
// lists the tables with a snapshot time, so a restarted sink still sweeps
// them (hold.go). With TTL set, live keys expire that long after their
// last write.
//
// The set <base>#columns lists the columns of the table the sink has
// written. A column a record's table has and the set lacks was added at
// the source; when it has a missing value (ADD COLUMN … DEFAULT, whose
// existing rows hold the default with no change event), the sink first
// gives every live row of the table that value, then adds the column to
// the set (columns.go).
//
// Values are stored as text, the same text in hash fields and in the JSON
// document's string members (JSON numbers are avoided because the script's
// JSON library would round them). The json format refuses a text value that
// is not valid UTF-8 (the record is dead-lettered); the hash format stores
// any bytes:
//
//	the text form of package pipeline/textform (its documentation has the table)
//
// # Writes
//
// Every write runs one Lua script (EVALSHA, loaded with SCRIPT LOAD at
// Open; EVAL when the server answers NOSCRIPT) that, atomically per call:
//
//   - ignores a record whose version is below the table's barrier, or not
//     newer than the key's _v (replays, duplicates, late snapshot rows);
//   - replaces the key's row with the record's, keeping the stored value
//     of each Unchanged column (hash: the stored field; json: the stored
//     document's member, merged in the script); an Unchanged column of a
//     key not held (or a tombstone) is NULL;
//   - turns a delete into a versioned tombstone, so a late snapshot row
//     cannot resurrect the key while the tombstone lives;
//   - for a truncate, raises the barrier to its version (never lowers it).
//     Write then SCANs the table's keys (MATCH P*, 1000 per page) and, one
//     script call per page, deletes those whose version is below the
//     barrier.
//     Until that finishes (or when a crash interrupted it; the retried
//     truncate resumes it) such keys may still be visible.
//
// Consumer contract: a key is the row when it is not a tombstone (no
// _deleted field or member) and its _v is not below the table's barrier
// key (absent barrier: no barrier); anything else reads as absent.
// Sink.Rows implements it.
//
// A Write encodes its records, runs its truncates first (their barrier
// makes the batch's older records no-ops and their purge deletes only
// older keys, so the result is the in-order one), then sends the rows in
// segments of 2,500, each split by key over eight partitions. A partition
// sends its share of a segment as one pipeline of script calls (up to 100
// records of one table each), and starts the next segment's pipeline only
// when the previous one was answered, so all changes of a key reach Redis
// in order while the other partitions, and the encoding of the next
// segment, go on. It returns nil only when every call was answered; with
// appendfsync always
// (what sluice requires of a Redis used as a sink) an answered write is on
// disk. Failures (classify.go):
//
//   - an error about one record — a value the format cannot hold, a row
//     key that holds another type (WRONGTYPE) or a string that is not a
//     sluice document — fails that record permanently through a
//     *pipeline.BatchError so it is dead-lettered (Invariant 7);
//   - a table no write can store — a column named _v or _deleted (or, in
//     the hash format, with an empty name), no key columns, its barrier
//     key or held set holding another type, an ACL that denies the sink's
//     user the table's keys — fails with a *pipeline.TableError, so the
//     runtime quarantines that table in this sink and the others go on;
//   - anything else — a lost connection, a transient server state
//     (LOADING, BUSY, OOM, READONLY, MASTERDOWN, ...), an error reply not
//     named above — fails the whole batch for the runtime to retry.
//
// The sink assumes a single Redis (not a cluster: a call's keys span hash
// slots) and that it is the only writer of its key prefix. Column names _v
// and _deleted are reserved.
package redis

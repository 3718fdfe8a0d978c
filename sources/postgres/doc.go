// Package postgres is sluice's PostgreSQL source: it captures committed
// changes through logical replication with the built-in pgoutput plugin
// (protocol version 2) and reads the initial snapshot of the captured
// tables.
//
// # Decoding core
//
// catalog.go, types.go, decoder.go and spill.go turn pgoutput messages into
// pipeline records; the connection, slot, preflight, initial load,
// replication loop, heartbeats and acknowledgements build on them.
//
//   - Values. Every connection that produces or compares values runs with
//     SessionSettings (UTC, ISO dates, postgres intervals, exact floats, hex
//     bytea), so the stream and the snapshot print a value identically.
//     DecodeText maps that text form onto the record model exactly (numeric
//     through its digits, never a float; intervals by field; infinities and
//     BC dates kept). Types without a mapping pass as their text.
//   - Shapes. LoadTableShape reads a table's shape from the catalog;
//     Relation messages make new shapes (pipeline.Table.Generation+1) when
//     a table's columns change. A record keeps the shape it was decoded
//     with.
//   - Transactions. Decoder emits each transaction as chunks of at most
//     ChunkRecords records; only the Final chunk carries the position to
//     checkpoint (Invariant 2), so a huge transaction never has to be held
//     whole (Invariant 6). Records are versioned {0, commit LSN, 0, 1+index
//     in the transaction} — never the per-change WAL position, which
//     interleaves across concurrent transactions.
//   - Streaming. With `streaming 'on'` the server sends large in-progress
//     transactions in blocks. The decoder buffers their raw messages per
//     transaction (in memory up to SpillThreshold bytes in total, then in a
//     spill file) and decodes them only at Stream Commit, at the commit
//     LSN; Stream Abort drops them. Reconnecting calls Decoder.Reset: the
//     server resends relations and every transaction not yet confirmed.
//   - Heartbeats. A non-transactional logical message with the heartbeat
//     prefix becomes a Final chunk holding one OpHeartbeat record, so idle
//     databases still advance (Invariant 8).
//
// Key columns are the primary key, else the replica identity index. Update
// messages whose key changed become a delete of the old key and an insert
// of the new one. Under a DEFERRABLE primary key two rows may share a key
// inside a transaction, so the keys such moves leave in doubt are read
// again at the commit and their rows appended to it (doubt.go). Unchanged
// TOAST values are filled from the old tuple under
// REPLICA IDENTITY FULL and are otherwise pipeline.UnchangedValue, never
// NULL.
package postgres

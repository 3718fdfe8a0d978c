// Package mysql is the MySQL / MariaDB binlog source (go-mysql v1.16.0,
// replication.BinlogSyncer; canal is not used).
//
//   - preflight.go checks the server settings, privileges and tables and
//     reports every problem with the statement that fixes it;
//   - stream.go owns the binlog connection: GTID start, heartbeats and read
//     timeouts, go-mysql's retry off, reconnects from the last whole
//     transaction; purged binlog detection;
//   - decoder.go turns events into transactions: positions only at commits
//     (Invariant 2), versions {epoch, file, offset, row index}, chunks of
//     large transactions, key changes as delete + insert, DDL;
//   - shapes.go reads each TABLE_MAP (binlog_row_metadata=FULL) into a
//     table shape, so every event decodes with the schema of its time;
//     catalog.go reads the same shape from information_schema for the
//     snapshot; types.go and values.go map both onto the record model;
//   - snapshot.go and snapshot_read.go are the consistent initial load
//     (Invariant 3);
//   - ddl.go classifies DDL statements.
package mysql

// Package mysql is the MySQL / MariaDB binlog source (go-mysql v1.16.0).
//
// So far it holds the preflight: Preflight checks, against the live
// server, everything the source needs and reports every problem at once,
// each with the statement or setting that fixes it —
//
//   - the binary log on, binlog_format=ROW, binlog_row_image=FULL,
//     binlog_row_metadata=FULL (MySQL 8.0.1+, MariaDB 10.5+), no partial
//     JSON updates (MySQL binlog_row_value_options);
//   - GTIDs: MySQL gtid_mode=ON and enforce_gtid_consistency=ON; MariaDB
//     gtid_strict_mode=ON (a warning when off);
//   - the privileges, by what the session can do: reading the binlog
//     status (REPLICATION CLIENT, MariaDB 10.5.2+: BINLOG MONITOR) and
//     REPLICATION SLAVE in the grants;
//   - every captured table exists, is readable and has a primary key;
//   - the pipeline's server id is neither the server's own nor a connected
//     replica's;
//   - binlog retention (a warning below a day).
//
// Streaming with replication.BinlogSyncer from GTID positions, the schema
// history, the consistent initial load and the metrics follow.
package mysql

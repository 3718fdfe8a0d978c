// Package bench is sluice's benchmark harness: scenarios that generate a
// workload in throwaway servers started by the integration harness, run
// sluice and the references on it in the same run, and report figures as
// ratios to those references.
//
// A Scenario runs once per repetition and returns its Figures; a Report
// keeps each figure's runs and shows the median with the min–max range.
// cmd/sluice-bench (`make bench`) writes reports as JSON (with the
// machine's description and the versions of every server and tool), as a
// markdown table and as a PNG chart (Report.Chart) to bench/results/, and
// with -docs into docs/performance.md.
//
// Scenarios (workloads (a)–(d) of the benchmark issue):
//
//   - pg-stream, pg-toast (PGStream): 1,000,000 inserts, 1,000,000 updates
//     and 200,000 deletes of a six-column table in 1,000-row transactions
//     (pg-toast: a 2 KB out-of-line label), into Kafka, against
//     pg_recvlogical, the Kafka ceiling and Debezium;
//   - pg-snapshot (PGSnapshot): a 5,000,000-row table, against COPY TO
//     STDOUT and Debezium's initial snapshot;
//   - pg-latency (PGLatency): commit-to-durable latency at 5,000 and
//     20,000 rows/s, and the recovery time after a kill -9 of the daemon;
//   - mariadb-kafka, mariadb-snapshot, mariadb-latency: the same on
//     MariaDB, against mariadb-binlog, the mariadb client and Debezium;
//   - mariadb-binlog, mariadb-binlog-bulk (MariaDBBinlog): the binlog
//     decoder alone and end to end into DuckDB, against mariadb-binlog and
//     MariaDB's own write rate.
package bench

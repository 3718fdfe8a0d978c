// Package bench is sluice's benchmark harness: scenarios that generate a
// workload in throwaway servers started by the integration harness, run
// sluice and the references on it in the same run, and report figures as
// ratios to those references.
//
// A Scenario runs once per repetition and returns its Figures; Run repeats
// every scenario, and a Report keeps each figure's runs and shows the
// median with the min–max range. Reports are written as JSON (with the
// machine's description) and as a markdown table to bench/results/ by
// cmd/sluice-bench (`make bench`).
//
// Scenarios so far (see MariaDBBinlog):
//
//   - mariadb-binlog: 1,000,000 inserts, 1,000,000 updates and 200,000
//     deletes of a 6-column table in 1,000-row transactions, read by
//     mariadb-binlog (the reference), by the source's decoder alone and
//     end to end into DuckDB, against MariaDB's own write rate;
//   - mariadb-binlog-bulk: the same measures on 1,000,000 inserts and
//     1,000,000 updates in 10,000-row transactions.
package bench

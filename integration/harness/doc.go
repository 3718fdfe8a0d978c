// Package harness starts real, throwaway servers (PostgreSQL, MariaDB, Redis,
// Kafka) from the machine's packages on 127.0.0.1 random ports in temp dirs,
// for tests, benchmarks and the quickstart, and tears them down.
//
// In CI (CI=true) a missing server binary is a test failure, never a skip.
package harness

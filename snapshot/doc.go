// Package snapshot will hold the resumable, watermark-reconciled snapshot
// engine shared by the Postgres and MySQL sources (DBLog style). The
// Postgres fast initial load (exported snapshot) lives in sources/postgres.
package snapshot

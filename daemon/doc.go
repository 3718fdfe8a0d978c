// Package daemon assembles one pipeline from its config — source, sinks,
// checkpoint store, dead-letter queue, metrics and the HTTP endpoints — and
// runs it. cmd/sluice, the quickstart and the end-to-end tests share it.
package daemon

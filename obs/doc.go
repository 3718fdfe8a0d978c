// Package obs makes a running pipeline observable: structured logs that
// never carry secrets, Prometheus metrics for every condition that risks loss
// or delay (Invariant 9), and the HTTP endpoints /metrics, /healthz, /readyz
// and /status, whose report `sluice status` renders.
package obs

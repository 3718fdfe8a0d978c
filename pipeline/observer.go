package pipeline

import "time"

// Observer receives the runtime's measurements (Invariant 9). The daemon
// adapts it to Prometheus; tests may record calls. Methods must not block.
type Observer interface {
	// Records counts records passing a stage: "source", "transform",
	// "sink:<name>".
	Records(stage string, n int)
	// BatchDuration observes how long a stage took for one batch.
	BatchDuration(stage string, d time.Duration)
	// InFlight reports records and bytes not yet durable.
	InFlight(records int, bytes int64)
	// CheckpointCommitted observes one commit.
	CheckpointCommitted(took time.Duration, at time.Time, seq uint64)
	// SinkRetry counts a retried write.
	SinkRetry(sink string)
	// DeadLetters counts records sent to the DLQ by stage.
	DeadLetters(stage string, n int)
	// EndToEnd observes source commit time → durable in every sink.
	EndToEnd(d time.Duration)
	// SinkBatchLimit reports how many records a sink's next write may
	// hold (the lane's adaptive size).
	SinkBatchLimit(sink string, n int)
	// SinkSplit counts a write split after a timeout, a too-large refusal
	// or a panic.
	SinkSplit(sink string)
	// SinkQuarantined reports how many tables a sink holds in quarantine
	// (see TableError).
	SinkQuarantined(sink string, tables int)
}

// NopObserver discards everything.
type NopObserver struct{}

func (NopObserver) Records(string, int)                                  {}
func (NopObserver) BatchDuration(string, time.Duration)                  {}
func (NopObserver) InFlight(int, int64)                                  {}
func (NopObserver) CheckpointCommitted(time.Duration, time.Time, uint64) {}
func (NopObserver) SinkRetry(string)                                     {}
func (NopObserver) DeadLetters(string, int)                              {}
func (NopObserver) EndToEnd(time.Duration)                               {}
func (NopObserver) SinkBatchLimit(string, int)                           {}
func (NopObserver) SinkSplit(string)                                     {}
func (NopObserver) SinkQuarantined(string, int)                          {}

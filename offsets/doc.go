// Package offsets keeps a pipeline's checkpoints durably in a local
// directory: it is sluice's embedded pipeline.OffsetStore.
//
// A directory belongs to one pipeline and one process at a time (an
// exclusive lock on <dir>/LOCK). It holds:
//
//	checkpoint.json       the newest committed checkpoint
//	checkpoint.prev.json  the checkpoint committed before it
//	checkpoint.json.tmp   a commit in progress (or left by a crash; ignored)
//
// Each file is an envelope {"format", "pipeline", "sha256", "checkpoint"}
// whose sha256 covers the compact JSON of the checkpoint, so torn, corrupt
// and hand-edited files are detected. A bad file is reported, never replaced:
// the operator chooses between `sluice run --from-previous-checkpoint`
// (LoadPrevious) and `sluice run --reset-offsets` (Reset).
//
// Commit writes and fsyncs the temporary file, hard-links the current file to
// checkpoint.prev.json, renames the temporary file over checkpoint.json and
// fsyncs the directory, so checkpoint.json exists at every instant after the
// first commit and, after a crash at any point, holds either the new or the
// previous checkpoint.
package offsets

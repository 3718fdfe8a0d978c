package offsets

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Format is the checkpoint file format this package writes and the newest it
// reads.
const Format = 1

// Recovery describes the operator's choices when the current checkpoint
// cannot be used. It is part of every CorruptError message.
const Recovery = "start from the previous checkpoint with `sluice run --from-previous-checkpoint` " +
	"(changes since it are replayed; sinks ignore what they already hold), or run " +
	"`sluice run --reset-offsets` to start over (re-snapshot)"

// envelope is the on-disk form of a checkpoint file.
type envelope struct {
	Format   int    `json:"format"`
	Pipeline string `json:"pipeline"`
	// Writer is the version of sluice that wrote the file, when known; it
	// makes "newer format" errors name the release to run.
	Writer     string          `json:"writer,omitempty"`
	SHA256     string          `json:"sha256"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

// CorruptError reports a checkpoint file that is unreadable, torn, or whose
// checksum does not match its content. The file is left untouched.
type CorruptError struct {
	Path   string
	Reason string
	// PreviousAvailable tells whether checkpoint.prev.json exists, i.e.
	// whether --from-previous-checkpoint can work.
	PreviousAvailable bool
}

func (e *CorruptError) Error() string {
	prev := ""
	if !e.PreviousAvailable {
		prev = " (note: no previous checkpoint file exists in this directory)"
	}
	return fmt.Sprintf("offsets: checkpoint file %s is corrupt: %s; it was left untouched. "+
		"Choose how to recover: %s%s", e.Path, e.Reason, Recovery, prev)
}

// FormatError reports a checkpoint written in a format newer than this
// sluice understands.
type FormatError struct {
	Path   string
	Format int
	Writer string // sluice version that wrote it, "" when unknown
}

func (e *FormatError) Error() string {
	by, need := "a newer sluice", fmt.Sprintf("the sluice release that wrote it (one that reads checkpoint format %d)", e.Format)
	if e.Writer != "" {
		by, need = "sluice "+e.Writer, "sluice "+e.Writer
	}
	return fmt.Sprintf("offsets: checkpoint file %s has format %d, written by %s; this sluice reads "+
		"checkpoint format %d at most. Run %s or later; do not downgrade sluice over an existing offsets directory",
		e.Path, e.Format, by, Format, need)
}

// ForeignError reports a checkpoint file that belongs to another pipeline.
type ForeignError struct {
	Path string
	Want string // the pipeline this store serves
	Got  string // the pipeline named in the file
}

func (e *ForeignError) Error() string {
	return fmt.Sprintf("offsets: checkpoint file %s belongs to pipeline %q, not %q; "+
		"give each pipeline its own offsets directory (the file was left untouched)",
		e.Path, e.Got, e.Want)
}

// ErrLocked is wrapped by OpenDir's error when another process holds the
// directory's lock.
var ErrLocked = errors.New("offsets directory is locked by another process")

// encode returns the file bytes for cp.
func encode(cp pipeline.Checkpoint, writer string) ([]byte, error) {
	payload, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("offsets: encode checkpoint: %w", err)
	}
	sum := sha256.Sum256(payload)
	env := envelope{
		Format:     Format,
		Pipeline:   cp.Pipeline,
		Writer:     writer,
		SHA256:     hex.EncodeToString(sum[:]),
		Checkpoint: payload,
	}
	out, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("offsets: encode checkpoint: %w", err)
	}
	return append(out, '\n'), nil
}

// decode verifies and parses file bytes read from path for pipeline want.
// Checks run in this order: JSON envelope, format, checksum, pipeline name.
// Corruption errors carry PreviousAvailable=false; the caller fills it.
func decode(path, want string, data []byte) (pipeline.Checkpoint, error) {
	var env envelope
	if len(bytes.TrimSpace(data)) == 0 {
		return pipeline.Checkpoint{}, &CorruptError{Path: path, Reason: "the file is empty (torn write)"}
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return pipeline.Checkpoint{}, &CorruptError{Path: path, Reason: "not valid JSON (torn or damaged): " + err.Error()}
	}
	if env.Format > Format {
		return pipeline.Checkpoint{}, &FormatError{Path: path, Format: env.Format, Writer: env.Writer}
	}
	if env.Format < 1 {
		return pipeline.Checkpoint{}, &CorruptError{Path: path, Reason: fmt.Sprintf("missing or invalid format %d", env.Format)}
	}
	if len(env.Checkpoint) == 0 || env.SHA256 == "" {
		return pipeline.Checkpoint{}, &CorruptError{Path: path, Reason: "checkpoint or sha256 field missing"}
	}
	var canon bytes.Buffer
	if err := json.Compact(&canon, env.Checkpoint); err != nil {
		return pipeline.Checkpoint{}, &CorruptError{Path: path, Reason: "checkpoint is not valid JSON: " + err.Error()}
	}
	sum := sha256.Sum256(canon.Bytes())
	if got := hex.EncodeToString(sum[:]); got != env.SHA256 {
		return pipeline.Checkpoint{}, &CorruptError{Path: path,
			Reason: fmt.Sprintf("sha256 mismatch (file says %.12s…, content hashes to %.12s…): damaged or edited by hand", env.SHA256, got)}
	}
	if env.Pipeline != want {
		return pipeline.Checkpoint{}, &ForeignError{Path: path, Want: want, Got: env.Pipeline}
	}
	var cp pipeline.Checkpoint
	if err := json.Unmarshal(canon.Bytes(), &cp); err != nil {
		return pipeline.Checkpoint{}, &CorruptError{Path: path, Reason: "checkpoint does not decode: " + err.Error()}
	}
	if cp.Pipeline != env.Pipeline {
		return pipeline.Checkpoint{}, &CorruptError{Path: path,
			Reason: fmt.Sprintf("envelope names pipeline %q but the checkpoint names %q", env.Pipeline, cp.Pipeline)}
	}
	return cp, nil
}

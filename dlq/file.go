package dlq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Suffix ends every dead-letter file name: <dir>/<pipeline>.dlq.jsonl.
const Suffix = ".dlq.jsonl"

// Option configures OpenFile.
type Option func(*File)

// WithRegisterer registers the file's gauges (see Collectors) with reg when
// the file opens and unregisters them when it closes. OpenFile fails if the
// registration does (for instance, the same pipeline registered twice).
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(f *File) { f.reg = reg }
}

// File is a pipeline.DLQ over one append-only JSON-lines file, one
// pipeline.DeadLetter per line (Raw is base64 in JSON and round-trips
// exactly). It is safe for concurrent use; Puts are serialised.
type File struct {
	path     string
	pipeline string
	reg      prometheus.Registerer
	now      func() time.Time

	depth  atomic.Int64
	oldest atomic.Int64 // UnixNano of the oldest letter; meaningful when depth > 0

	mu     sync.Mutex
	f      *os.File
	size   int64 // bytes of complete lines
	broken error // set when a failed append could not be undone
	closed bool

	collectors []prometheus.Collector
}

var _ pipeline.DLQ = (*File)(nil)

// OpenFile opens (creating with mode 0600, its directory with 0700) the
// dead-letter file of pipeline in dir. It scans the existing file to restore
// Depth and OldestAge. A torn last line — an append cut short by a crash,
// which Put never reported as successful — is truncated away; only complete
// lines count. Complete lines that do not parse still count towards Depth.
func OpenFile(dir, pipelineName string, opts ...Option) (*File, error) {
	if pipelineName == "" || pipelineName == "." || pipelineName == ".." || strings.ContainsAny(pipelineName, `/\`) {
		return nil, fmt.Errorf("dlq: pipeline name %q cannot be used in a file name", pipelineName)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dlq: create directory: %w", err)
	}
	path := filepath.Join(dir, pipelineName+Suffix)
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	f := &File{path: path, pipeline: pipelineName, f: fh, now: time.Now}
	for _, o := range opts {
		o(f)
	}
	if err := f.scan(); err != nil {
		fh.Close()
		return nil, err
	}
	f.collectors = []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "sluice_dlq_depth",
			Help:        "Dead letters stored in the pipeline's dead-letter queue.",
			ConstLabels: prometheus.Labels{"pipeline": pipelineName},
		}, func() float64 { return float64(f.Depth()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "sluice_dlq_oldest_age_seconds",
			Help:        "Age of the oldest dead letter in the pipeline's dead-letter queue; 0 when empty.",
			ConstLabels: prometheus.Labels{"pipeline": pipelineName},
		}, func() float64 { return f.OldestAge().Seconds() }),
	}
	if f.reg != nil {
		for i, c := range f.collectors {
			if err := f.reg.Register(c); err != nil {
				for _, done := range f.collectors[:i] {
					f.reg.Unregister(done)
				}
				fh.Close()
				return nil, fmt.Errorf("dlq: register metrics of pipeline %q: %w", pipelineName, err)
			}
		}
	}
	return f, nil
}

// scan counts complete lines, finds the oldest letter and cuts a torn tail.
func (f *File) scan() error {
	if _, err := f.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("dlq: %w", err)
	}
	r := bufio.NewReaderSize(f.f, 64<<10)
	var good, depth, oldest int64
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			break // line holds the torn tail, if any
		}
		if err != nil {
			return fmt.Errorf("dlq: read %s: %w", f.path, err)
		}
		good += int64(len(line))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		depth++
		var head struct {
			Time time.Time `json:"time"`
		}
		if json.Unmarshal(line, &head) == nil && !head.Time.IsZero() {
			if t := head.Time.UnixNano(); oldest == 0 || t < oldest {
				oldest = t
			}
		}
	}
	fi, err := f.f.Stat()
	if err != nil {
		return fmt.Errorf("dlq: %w", err)
	}
	if fi.Size() > good {
		// The tail was never acknowledged by Put: dropping it loses nothing
		// the runtime took as handled (Invariant 7 holds for complete lines).
		if err := f.f.Truncate(good); err != nil {
			return fmt.Errorf("dlq: cut torn last line of %s: %w", f.path, err)
		}
		if err := f.f.Sync(); err != nil {
			return fmt.Errorf("dlq: fsync %s: %w", f.path, err)
		}
	}
	f.size = good
	f.depth.Store(depth)
	f.oldest.Store(oldest)
	return nil
}

// Path returns the dead-letter file's path.
func (f *File) Path() string { return f.path }

// Put appends letters and fsyncs the file before returning. Empty
// Pipeline fields are set to the file's pipeline and zero Times to now. It
// blocks for one write and one fsync; concurrent calls are serialised. On
// error nothing of the call is kept: the file is cut back to its previous
// length (if even that fails, every later Put fails). It returns ctx.Err()
// if ctx is done before writing.
//
// Invariant 7: a letter is on disk, raw bytes, error and position included,
// before Put returns nil, and only then may the runtime acknowledge it.
func (f *File) Put(ctx context.Context, letters []pipeline.DeadLetter) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(letters) == 0 {
		return nil
	}
	var buf bytes.Buffer
	now := f.now()
	var oldest int64
	for _, l := range letters {
		if l.Pipeline == "" {
			l.Pipeline = f.pipeline
		}
		if l.Time.IsZero() {
			l.Time = now
		}
		b, err := json.Marshal(l)
		if err != nil {
			return fmt.Errorf("dlq: encode dead letter: %w", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
		if t := l.Time.UnixNano(); oldest == 0 || t < oldest {
			oldest = t
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("dlq: file is closed")
	}
	if f.broken != nil {
		return f.broken
	}
	n, err := f.f.Write(buf.Bytes())
	if err == nil {
		err = f.f.Sync()
	}
	if err != nil {
		if terr := f.f.Truncate(f.size); terr != nil {
			f.broken = fmt.Errorf("dlq: %s is in an unknown state after a failed append (%v; undo failed: %v); restart sluice to recover it", f.path, err, terr)
		}
		return fmt.Errorf("dlq: append to %s: %w", f.path, err)
	}
	f.size += int64(n)
	if cur := f.oldest.Load(); f.depth.Load() == 0 || oldest < cur {
		f.oldest.Store(oldest)
	}
	f.depth.Add(int64(len(letters)))
	return nil
}

// Depth returns the number of dead letters in the file. It does not block.
func (f *File) Depth() int64 { return f.depth.Load() }

// OldestAge returns how long ago the oldest dead letter was stored, 0 when
// the queue is empty. It does not block.
func (f *File) OldestAge() time.Duration {
	if f.depth.Load() == 0 {
		return 0
	}
	o := f.oldest.Load()
	if o == 0 {
		return 0
	}
	if d := f.now().Sub(time.Unix(0, o)); d > 0 {
		return d
	}
	return 0
}

// Collectors returns the sluice_dlq_depth and sluice_dlq_oldest_age_seconds
// gauges, labelled pipeline=<name>, for callers that register them
// themselves instead of using WithRegisterer.
func (f *File) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector(nil), f.collectors...)
}

// Close closes the file and unregisters the gauges registered by
// WithRegisterer. Put already made every letter durable. It is idempotent.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if f.reg != nil {
		for _, c := range f.collectors {
			f.reg.Unregister(c)
		}
	}
	return f.f.Close()
}

package redis

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// Options configures a Sink.
type Options struct {
	// Name identifies the sink in logs.
	Name string
	// Addr is the server's host:port.
	Addr     string
	Username string
	Password string
	DB       int
	// KeyTemplate names a row's key; placeholders {database}, {schema},
	// {table} and {pk} (the key values joined by ':', each with '\' and ':'
	// escaped by a '\'). It must end with a separator and {pk}, the
	// separator not being '#'. Default "{schema}.{table}:{pk}".
	KeyTemplate string
	// Format is "json" (default: a string, the row as a JSON object, its
	// version first) or "hash" (a hash, one field per column).
	Format string
	// TTL, when positive, expires live keys that long after their last
	// write.
	TTL time.Duration
	// TombstoneTTL is how long a delete's tombstone is kept (default 168h).
	// It must exceed the longest replay horizon: a record older than an
	// expired tombstone could bring its key back.
	TombstoneTTL time.Duration
	// TLS connects with TLS (server name from Addr).
	TLS bool
}

const (
	defaultTemplate     = "{schema}.{table}:{pk}"
	defaultTombstoneTTL = 168 * time.Hour
	fieldVersion        = "_v"
	fieldDeleted        = "_deleted"
	scanCount           = 1000
	chunkSize           = 100 // row records per script call
)

// Sink keeps Redis keys in step with the captured tables' rows, as a cache
// (see the package documentation). It implements pipeline.Sink. Write calls
// are serialized.
type Sink struct {
	opts Options
	log  *zap.Logger
	sha  string
	// liveTTL and tombTTL are Options.TTL and TombstoneTTL in milliseconds,
	// as script arguments.
	liveTTL, tombTTL string

	now func() time.Time

	mu     sync.Mutex
	client *goredis.Client
	tables map[*pipeline.Table]*tableInfo
	// snapshots holds, by table base, the stored time (ms) of the last
	// snapshot record (see hold.go); lastSweep is the last sweep's time.
	snapshots map[string]int64
	// columns caches, by table base, the columns sets; filled holds the
	// table shapes whose columns are in them (columns.go).
	columns   map[string]map[string]bool
	filled    map[*pipeline.Table]bool
	lastSweep time.Time
	// gen is the generation recorded in generationKey.
	gen upsert.Generation
}

var _ pipeline.Sink = (*Sink)(nil)

// New returns an unopened Sink. A nil logger logs nothing.
func New(opts Options, log *zap.Logger) *Sink {
	if opts.Name == "" {
		opts.Name = "redis"
	}
	if opts.KeyTemplate == "" {
		opts.KeyTemplate = defaultTemplate
	}
	if opts.Format == "" {
		opts.Format = "json"
	}
	if opts.TombstoneTTL <= 0 {
		opts.TombstoneTTL = defaultTombstoneTTL
	}
	if log == nil {
		log = zap.NewNop()
	}
	sum := sha1.Sum([]byte(writeScript))
	return &Sink{opts: opts, log: log.With(zap.String("sink", opts.Name)), sha: hex.EncodeToString(sum[:]),
		liveTTL: strconv.FormatInt(max(opts.TTL.Milliseconds(), 0), 10),
		tombTTL: strconv.FormatInt(opts.TombstoneTTL.Milliseconds(), 10),
		tables:  map[*pipeline.Table]*tableInfo{}, now: time.Now}
}

func (s *Sink) validate() error {
	o := &s.opts
	if o.Addr == "" {
		return errors.New("redis sink: addr is required")
	}
	if o.Format != "hash" && o.Format != "json" {
		return fmt.Errorf("redis sink: format %q: want hash or json", o.Format)
	}
	t := o.KeyTemplate
	if strings.Count(t, "{pk}") != 1 || !strings.HasSuffix(t, "{pk}") || len(t) < 5 {
		return fmt.Errorf("redis sink: key template %q must end with a separator and {pk}", t)
	}
	if sep := t[len(t)-5]; sep == '#' || sep == '}' {
		return fmt.Errorf("redis sink: key template %q: the separator before {pk} must be a literal character other than '#'", t)
	}
	return nil
}

// Open connects, checks the server and loads the write script. It may be
// retried; opening an open Sink does nothing.
func (s *Sink) Open(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return nil
	}
	if err := s.validate(); err != nil {
		return pipeline.Fatal(err)
	}
	ro := &goredis.Options{Addr: s.opts.Addr, Username: s.opts.Username, Password: s.opts.Password, DB: s.opts.DB,
		PoolSize:    4 * partitions,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		// The runtime bounds each Write with a deadline; socket reads and
		// writes follow it, so a black-holed server fails the attempt.
		ContextTimeoutEnabled: true}
	if s.opts.TLS {
		host, _, err := net.SplitHostPort(s.opts.Addr)
		if err != nil {
			host = s.opts.Addr
		}
		ro.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	}
	c := goredis.NewClient(ro)
	sha, err := c.ScriptLoad(ctx, writeScript).Result()
	if err != nil {
		c.Close()
		return fmt.Errorf("redis sink: connect %s: %w", s.opts.Addr, err)
	}
	if sha != s.sha {
		c.Close()
		return pipeline.Fatal(fmt.Errorf("redis sink: server hashed the script as %s, want %s", sha, s.sha))
	}
	s.columns, s.filled = map[string]map[string]bool{}, map[*pipeline.Table]bool{}
	if err := s.loadSnapshots(ctx, c); err != nil {
		c.Close()
		return err
	}
	if err := s.loadGeneration(ctx, c); err != nil {
		c.Close()
		return err
	}
	s.client = c
	s.log.Info("redis sink open", zap.String("addr", s.opts.Addr), zap.String("format", s.opts.Format))
	return nil
}

// Close releases the connections; Write already made everything durable.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		return nil
	}
	err := s.client.Close()
	s.client = nil
	return err
}

// tableInfo is what a table shape needs for its keys.
type tableInfo struct {
	id      pipeline.TableID
	prefix  string // every row key of the table starts with it
	base    string // the barrier key without "#barrier": names the table's other keys
	barrier string // the barrier key
	tomb    string // this Write's tombstone TTL argument (hold.go)
	pattern string // SCAN MATCH pattern of the row keys
	// reserved: badCol, a column's name, collides with a reserved field
	// (see shapeError).
	reserved bool
	badCol   string
	names    []any // the column names, boxed once for the script arguments
}

func (s *Sink) info(t *pipeline.Table) *tableInfo {
	if ti := s.tables[t]; ti != nil {
		return ti
	}
	tmpl := strings.TrimSuffix(s.opts.KeyTemplate, "{pk}")
	prefix := t.ID.Name(tmpl)
	base := prefix[:len(prefix)-1]
	ti := &tableInfo{id: t.ID, prefix: prefix, base: base, barrier: barrierKey(base), pattern: globEscape(prefix) + "*", tomb: s.tombTTL}
	for _, c := range t.Columns {
		ti.names = append(ti.names, c.Name)
		if c.Name == fieldVersion || c.Name == fieldDeleted || (s.opts.Format == "hash" && c.Name == "") {
			ti.reserved, ti.badCol = true, c.Name
		}
	}
	s.tables[t] = ti
	return ti
}

// rowKey is the key of the row whose image is img.
func (s *Sink) rowKey(t *pipeline.Table, ti *tableInfo, img []any) (string, error) {
	var b strings.Builder
	b.WriteString(ti.prefix)
	for i, idx := range t.KeyIdx {
		if idx >= len(img) {
			return "", fmt.Errorf("key column %d missing from the image", idx)
		}
		c := &t.Columns[idx]
		v := img[idx]
		if v == nil {
			return "", fmt.Errorf("key column %s is NULL", c.Name)
		}
		if _, ok := v.(pipeline.Unchanged); ok {
			return "", fmt.Errorf("key column %s is Unchanged", c.Name)
		}
		enc, err := textform.Encode(c, v)
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(escapeKeyPart(enc))
	}
	return b.String(), nil
}

// args builds a row record's row key and its script arguments (see
// writeScript, operation w).
func (s *Sink) args(r *pipeline.Record) (key string, argv []any, err error) {
	t := r.Table
	ti := s.info(t)
	if err := shapeError(t, ti); err != nil {
		return "", nil, err // Write refuses the table before encoding
	}
	img := r.After
	if r.Op == pipeline.OpDelete {
		img = r.Before
	}
	if img == nil {
		return "", nil, fmt.Errorf("%s record without an image", r.Op)
	}
	if key, err = s.rowKey(t, ti, img); err != nil {
		return "", nil, err
	}
	v := r.Version.Compact()
	var version any = v
	if r.Op == pipeline.OpDelete {
		return key, []any{"d", version}, nil
	}
	if len(img) > len(t.Columns) {
		return "", nil, fmt.Errorf("image has %d values for %d columns", len(img), len(t.Columns))
	}
	// The header: nd, or -nk, nd followed by the nk names.
	nk := 0
	for _, v := range img {
		if _, ok := v.(pipeline.Unchanged); ok {
			nk++
		}
	}
	head := 1
	if nk > 0 {
		head = 2
	}
	argv = make([]any, head, head+nk+2*len(t.Columns)+2)
	if nk > 0 {
		argv[0] = strconv.Itoa(-nk)
		for i, v := range img {
			if _, ok := v.(pipeline.Unchanged); ok {
				argv = append(argv, ti.names[i])
			}
		}
	}
	if s.opts.Format == "hash" {
		argv = append(argv, fieldVersion)
	}
	argv = append(argv, version)
	var doc []byte
	if s.opts.Format == "json" {
		// The version first: the script reads it from there.
		doc = append(make([]byte, 0, 256), `{"_v":"`...)
		doc = append(append(doc, v...), '"')
	}
	for i, v := range img {
		c := &t.Columns[i]
		var enc string
		present := false
		switch v.(type) {
		case nil, pipeline.Unchanged:
		default:
			if enc, err = textform.Encode(c, v); err != nil {
				return "", nil, fmt.Errorf("column %s: %w", c.Name, err)
			}
			present = true
		}
		if s.opts.Format == "hash" {
			if present {
				argv = append(argv, ti.names[i], enc)
			}
			continue
		}
		if present && !utf8.ValidString(enc) {
			// JSON text cannot hold it without a replacement character;
			// the hash format stores any bytes.
			return "", nil, fmt.Errorf("column %s: value is not valid UTF-8, which a JSON document cannot hold (format hash can)", c.Name)
		}
		doc = append(jsontext.AppendString(append(doc, ','), c.Name), ':')
		if present {
			doc = jsontext.AppendString(doc, enc)
		} else {
			doc = append(doc, "null"...)
		}
	}
	if s.opts.Format == "json" {
		argv = append(argv, string(append(doc, '}')))
	}
	argv[head-1] = count(len(argv) - head - nk)
	return key, argv, nil
}

// smallCounts are the boxed texts of 0…255, so the argument counts of a
// record cost no allocation.
var smallCounts = func() (c [256]any) {
	for i := range c {
		c[i] = strconv.Itoa(i)
	}
	return c
}()

func count(n int) any {
	if n < len(smallCounts) {
		return smallCounts[n]
	}
	return strconv.Itoa(n)
}

// Write applies the records and returns once Redis acknowledged every
// script call (durable with appendfsync always). Truncates run first; the
// other records go in one pipeline of EVALSHA calls, in order. It fails
// as classify.go describes: records in a *pipeline.BatchError, a table in
// a *pipeline.TableError (nothing is written when its shape is refused),
// or the whole batch.
func (s *Sink) Write(ctx context.Context, records []pipeline.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		return errors.New("redis sink: write before open")
	}
	var failed []pipeline.RecordError
	// The runtime logs and counts each failed record as it dead-letters
	// it (Invariant 9).
	fail := func(i int, err error) {
		failed = append(failed, pipeline.RecordError{Index: i, Err: err, Permanent: true})
	}
	for i := range records {
		if r := &records[i]; isRow(r) || (r.Table != nil && r.Op == pipeline.OpShape) {
			// Fill the cache before the encoders read it.
			if err := shapeError(r.Table, s.info(r.Table)); err != nil {
				return err
			}
		}
	}
	if err := s.recordGeneration(ctx, records); err != nil {
		return s.wrap(ctx, err)
	}
	if err := s.fillAdded(ctx, records); err != nil {
		var te *pipeline.TableError
		if errors.As(err, &te) {
			return te
		}
		return s.wrap(ctx, err)
	}
	now := s.now()
	if err := s.stampSnapshots(ctx, records, now); err != nil {
		return s.wrap(ctx, err)
	}
	// A truncate's barrier makes the batch's older records no-ops and its
	// purge deletes only older keys: running truncates first gives the
	// state the records in order give.
	for i := range records {
		r := &records[i]
		if r.Op != pipeline.OpTruncate || r.Table == nil {
			continue
		}
		if err := s.truncate(ctx, r); err != nil {
			if te := tableError(ctx, s.info(r.Table), err); te != nil {
				return te
			}
			return s.wrap(ctx, err)
		}
	}
	// The rows go in segments, each split by key over the partitions.
	// Every partition runs its share of each segment in segment order on
	// its own goroutine, so every key's changes reach Redis in order
	// (Invariant 4), while the next segment is encoded and the other
	// partitions go on without waiting for the slowest one.
	results := make([]partResult, partitions)
	work := make([]chan []*chunk, partitions)
	var stop atomic.Bool // a partition failed: the batch will be retried
	var wg sync.WaitGroup
	for p := range work {
		work[p] = make(chan []*chunk, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[p]
			for chunks := range work[p] {
				if res.err != nil {
					continue // drain
				}
				r := s.execPartition(ctx, chunks)
				res.failed = append(res.failed, r.failed...)
				if res.err = r.err; r.err != nil {
					stop.Store(true)
				}
			}
		}()
	}
	for lo := 0; lo < len(records) && !stop.Load(); lo += segmentSize {
		parts := s.encodeSegment(records[lo:min(lo+segmentSize, len(records))], lo, fail)
		for p, chunks := range parts {
			if len(chunks) > 0 {
				work[p] <- chunks
			}
		}
	}
	for _, w := range work {
		close(w)
	}
	wg.Wait()
	for _, res := range results {
		// A table's refusal first: it holds whatever else failed.
		var te *pipeline.TableError
		if errors.As(res.err, &te) {
			return te
		}
	}
	for _, res := range results {
		if res.err != nil {
			return s.wrap(ctx, res.err)
		}
	}
	for _, res := range results {
		for _, f := range res.failed {
			fail(f.Index, f.Err)
		}
	}
	s.sweep(ctx, now)
	if len(failed) > 0 {
		sort.Slice(failed, func(a, b int) bool { return failed[a].Index < failed[b].Index })
		return &pipeline.BatchError{Failed: failed}
	}
	return nil
}

const (
	partitions    = 8 // concurrent pipelines per Write
	encodeWorkers = 2
	segmentSize   = 2500 // records encoded while the previous ones are written
)

// isRow reports records that write a row key (not truncates, heartbeats).
func isRow(r *pipeline.Record) bool {
	return r.Table != nil && r.Op.IsData() && r.Op != pipeline.OpTruncate
}

// encodeSegment encodes recs (records[base:base+len(recs)]) in parallel and
// groups them into chunks per partition, by key, each partition keeping
// the order of its records; a record that cannot be encoded goes to fail.
// Each chunk is one script call of up to chunkSize records (one atomic
// call amortizes a call's overhead).
func (s *Sink) encodeSegment(recs []pipeline.Record, base int, fail func(int, error)) [][]*chunk {
	type encoded struct {
		key  string
		argv []any
		err  error
	}
	enc := make([]encoded, len(recs))
	workers := min(encodeWorkers, 1+len(recs)/1000)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(recs); i += workers {
				if r := &recs[i]; isRow(r) {
					e := &enc[i]
					e.key, e.argv, e.err = s.args(r)
				}
			}
		}()
	}
	wg.Wait()
	// A chunk holds one table's records (its barrier key is the call's
	// first key); a key's records all land in one partition, in order.
	type open struct {
		part  int
		table *tableInfo
	}
	parts := make([][]*chunk, partitions)
	last := map[open]*chunk{}
	for i := range recs {
		e := &enc[i]
		r := &recs[i]
		if !isRow(r) {
			continue
		}
		if e.err != nil {
			fail(base+i, e.err)
			continue
		}
		o := open{partitionOf(e.key), s.tables[r.Table]}
		c := last[o]
		if c == nil || len(c.idx) == chunkSize {
			c = &chunk{table: o.table, keys: []string{o.table.barrier}, argv: []any{"w", s.opts.Format[:1], s.liveTTL, o.table.tomb}}
			parts[o.part] = append(parts[o.part], c)
			last[o] = c
		}
		c.idx = append(c.idx, base+i)
		c.keys = append(c.keys, e.key)
		c.argv = append(c.argv, e.argv...)
	}
	return parts
}

// chunk is one script call: the records idx of one table, in order.
type chunk struct {
	table *tableInfo
	idx   []int
	keys  []string
	argv  []any
}

type partResult struct {
	failed []pipeline.RecordError // permanent per-record failures
	err    error                  // the batch failed (a table's refusal, or transient)
}

func partitionOf(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return int(h % partitions)
}

// execPartition runs the chunks as one pipeline of EVALSHA calls, in
// order, and re-runs with EVAL those the server had no script for.
func (s *Sink) execPartition(ctx context.Context, chunks []*chunk) (out partResult) {
	useEval := false
	for len(chunks) > 0 {
		pipe := s.client.Pipeline()
		cmds := make([]*goredis.Cmd, len(chunks))
		for j, c := range chunks {
			if useEval {
				cmds[j] = pipe.Eval(ctx, writeScript, c.keys, c.argv...)
			} else {
				cmds[j] = pipe.EvalSha(ctx, s.sha, c.keys, c.argv...)
			}
		}
		_, _ = pipe.Exec(ctx)
		var again []*chunk
		for j, cmd := range cmds {
			c := chunks[j]
			res, err := cmd.Slice()
			if err == nil {
				err = refused(res, c, &out)
			}
			if err != nil {
				if goredis.HasErrorPrefix(err, "NOSCRIPT") && !useEval {
					again = append(again, c)
					continue
				}
				if te := tableError(ctx, c.table, err); te != nil {
					return partResult{err: te}
				}
				return partResult{err: err}
			}
		}
		// Redis lost its script cache (a restart, SCRIPT FLUSH): re-run
		// those chunks with EVAL, which also caches the script again. The
		// version guard makes re-running them after later ones harmless.
		chunks, useEval = again, true
	}
	return out
}

// truncate sets the table's barrier, then deletes the keys older than the
// barrier, SCAN page by SCAN page (each page in one script call).
// refused adds the records the script refused (its reply: index, message
// pairs) to out; a malformed reply is an error of the whole chunk.
func refused(res []any, c *chunk, out *partResult) error {
	if len(res)%2 != 0 {
		return fmt.Errorf("script returned %d values, want index, message pairs", len(res))
	}
	for k := 0; k < len(res); k += 2 {
		i, ok1 := res[k].(int64)
		msg, ok2 := res[k+1].(string)
		if !ok1 || !ok2 || i < 1 || int(i) > len(c.idx) {
			return fmt.Errorf("script returned %v, %v for a chunk of %d records", res[k], res[k+1], len(c.idx))
		}
		out.failed = append(out.failed, pipeline.RecordError{Index: c.idx[i-1], Err: fmt.Errorf("redis: %s", msg), Permanent: true})
	}
	return nil
}

func (s *Sink) truncate(ctx context.Context, r *pipeline.Record) error {
	ti := s.info(r.Table)
	if err := s.run(ctx, []string{ti.barrier}, []any{"t", s.opts.Format[:1], r.Version.Compact()}); err != nil {
		return err
	}
	argv := []any{"p", s.opts.Format[:1]}
	var cursor uint64
	for {
		keys, next, err := s.client.Scan(ctx, cursor, ti.pattern, scanCount).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := s.run(ctx, append([]string{ti.barrier}, keys...), argv); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// run calls the script once, with EVAL when the server lost it.
func (s *Sink) run(ctx context.Context, keys []string, argv []any) error {
	err := s.client.EvalSha(ctx, s.sha, keys, argv...).Err()
	if goredis.HasErrorPrefix(err, "NOSCRIPT") {
		err = s.client.Eval(ctx, writeScript, keys, argv...).Err()
	}
	return err
}

func (s *Sink) wrap(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("redis sink %s: %w", s.opts.Name, err)
}

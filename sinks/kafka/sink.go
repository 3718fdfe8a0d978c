package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
	"github.com/sluice-cdc/sluice/schema"
)

// Sink produces change events to Kafka, one topic per table, in the
// Confluent wire format with schemas from a registry. It implements
// pipeline.Sink; see the package documentation for the delivery contract.
// Write calls are serialized.
type Sink struct {
	opts  Options
	reg   schema.Registry
	log   *zap.Logger
	cache *schema.Cache

	mu     sync.Mutex
	client *kgo.Client
	admin  *kadm.Client
	// Per process: shapes ready to produce, the newest shape per table (to
	// describe changes), registered (subject, schema) ids, subjects whose
	// level was set, topics prepared.
	shapes     map[shapeKey]*shape
	last       lastShape // the shape shapeOf returned last
	prev       map[pipeline.TableID]*pipeline.Table
	registered map[[2]string]int
	levelSet   map[string]bool
	topics     map[string]*topicState
	// txn is the high-water mark state of an ExactlyOnce sink (txn.go).
	txn txnState
	// gen is the recorded generation of a plain sink (generation.go).
	gen plainGen
}

var _ pipeline.Sink = (*Sink)(nil)

// New checks opts and returns an unopened Sink writing schemas to reg. A nil
// logger logs nothing.
func New(opts Options, reg schema.Registry, log *zap.Logger) (*Sink, error) {
	if err := opts.normalize(); err != nil {
		return nil, fmt.Errorf("kafka sink %s: %w", opts.Name, err)
	}
	if reg == nil {
		return nil, fmt.Errorf("kafka sink %s: no schema registry", opts.Name)
	}
	if _, err := TopicName(opts.TopicTemplate, opts.ServerName, pipeline.TableID{Database: "d", Schema: "s", Table: "t"}); err != nil {
		return nil, fmt.Errorf("kafka sink %s: %w", opts.Name, err)
	}
	if _, err := opts.clientOpts(); err != nil {
		return nil, fmt.Errorf("kafka sink %s: %w", opts.Name, err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Sink{
		opts: opts, reg: reg, log: log.With(zap.String("sink", opts.Name)),
		cache: schema.NewCache(schema.Options{ConnectorName: opts.ConnectorName, ServerName: opts.ServerName, Unchanged: opts.Unchanged}),
	}, nil
}

// Open connects to the brokers (failing when none answers) and creates the
// DLQ topic when configured. It may be retried; opening an open Sink does
// nothing.
func (s *Sink) Open(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return nil
	}
	opts, err := s.opts.clientOpts()
	if err != nil {
		return pipeline.Fatal(fmt.Errorf("kafka sink %s: %w", s.opts.Name, err))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return pipeline.Fatal(fmt.Errorf("kafka sink %s: %w", s.opts.Name, err))
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		err = fmt.Errorf("kafka sink %s: brokers %v: %w", s.opts.Name, s.opts.Brokers, err)
		var unknownCA x509.UnknownAuthorityError
		var badCert *tls.CertificateVerificationError
		if isFatal(err) || errors.As(err, &unknownCA) || errors.As(err, &badCert) {
			// Wrong credentials or an untrusted certificate: retrying
			// cannot help, the config must change.
			return pipeline.Fatal(err)
		}
		return err
	}
	s.client, s.admin = cl, kadm.NewClient(cl)
	s.shapes, s.last = map[shapeKey]*shape{}, lastShape{}
	s.prev = map[pipeline.TableID]*pipeline.Table{}
	s.registered = map[[2]string]int{}
	s.levelSet = map[string]bool{}
	s.topics = map[string]*topicState{}
	s.gen = plainGen{}
	if s.opts.DLQTopic != "" {
		if _, err := s.ensureTopic(ctx, s.opts.DLQTopic, false); err != nil {
			s.closeLocked()
			return fmt.Errorf("kafka sink %s: dlq topic: %w", s.opts.Name, err)
		}
	}
	if s.opts.ExactlyOnce {
		if err := s.openTxn(ctx); err != nil {
			s.closeLocked()
			return err
		}
	}
	s.log.Info("kafka sink open", zap.Strings("brokers", s.opts.Brokers), zap.String("envelope", s.opts.Envelope),
		zap.String("compression", s.opts.Producer.Compression))
	return nil
}

// Close releases the client; Write already waited for every record.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
	return nil
}

func (s *Sink) closeLocked() {
	if s.client != nil {
		s.client.Close()
		s.client, s.admin = nil, nil
	}
}

// Write produces the batch and returns nil only when the broker
// acknowledged every record (acks=all, idempotent producer), which is what
// lets the runtime's ack ledger advance (Invariant 1).
//
// It first resolves every table shape of the batch (registered,
// compatibility checked), then encodes and produces each record in turn,
// asynchronously, and waits for every promise. Records that cannot be
// encoded go to DLQTopic
// or come back as permanent failures in a *pipeline.BatchError (Invariant
// 7). A record the broker refuses for good (invalid) is a permanent
// failure too; a batch refused as too large, a table's topic the sink may
// not write or that does not exist, and a fatal answer fail it as judge
// describes; any other produce error fails the whole batch with a plain
// error so the runtime retries it: a replay only duplicates events, which
// consumers absorb because they upsert by key and every record carries
// its version (Invariant 4).
func (s *Sink) Write(ctx context.Context, records []pipeline.Record) error {
	p, err := s.Start(ctx, records)
	if err != nil {
		return err
	}
	select {
	case <-p.Done():
		if err := p.Err(); err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr // the records failed because ctx ended
			}
			return err
		}
		return nil
	case <-ctx.Done():
		// Records still buffered fail with ctx's error; those already
		// sent may land, which a retry only duplicates.
		return ctx.Err()
	}
}

// Pipelines implements pipeline.Pipeliner: without ExactlyOnce batches
// may be in flight together. A transactional batch must be committed
// before the next begins: the high-water mark skips what a later
// committed batch covers, so an earlier batch retried after it would be
// lost.
func (s *Sink) Pipelines() bool { return !s.opts.ExactlyOnce }

// Start implements pipeline.Pipeliner: it does what Write does up to the
// produce promises and returns once every record is handed to the
// producer, which keeps the order of successive batches per partition
// (idempotent, acks=all). The Pending's Err is what Write would return.
// ctx must stay live until the Pending is done. With ExactlyOnce the
// batch is one transaction, written whole before Start returns.
func (s *Sink) Start(ctx context.Context, records []pipeline.Record) (pipeline.Pending, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		return nil, errors.New("kafka sink: write before open")
	}
	if s.opts.ExactlyOnce {
		return pipeline.Settled(s.writeTxn(ctx, records)), nil
	}
	// Invariant 10: the batch's generation is recorded before the batch.
	if err := s.recordGeneration(ctx, records); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	// Every table shape of the batch is resolved (registered, checked
	// for compatibility) before anything is produced, so a refused shape
	// stops the pipeline with nothing of the batch sent.
	var last *pipeline.Table
	var lastDest *pipeline.Dest
	for i := range records {
		r := &records[i]
		if !r.Op.Shaped() || r.Table == nil || r.Table == last && r.Dest == lastDest {
			continue
		}
		last, lastDest = r.Table, r.Dest
		for _, topic := range topicsOf(r) {
			var ue unencodable
			if _, err := s.shapeOf(ctx, r.Table, topic); err != nil && !errors.As(err, &ue) {
				if cerr := ctx.Err(); cerr != nil {
					return nil, cerr
				}
				return nil, err
			}
		}
	}
	// Then each record is produced as soon as it is encoded, so the
	// broker acknowledges the batch's first records while later ones are
	// still being encoded. A transient failure after that (a cancelled
	// context) returns with earlier records already sent: the retry only
	// duplicates them.
	b := &batch{s: s, f: newFlight(), work: make([]pending, 0, len(records)), mem: &slab{}}
	for i := range records {
		r := &records[i]
		if !r.Op.IsData() {
			continue // heartbeats and shapes carry no row; the runtime checkpoints them
		}
		recs, err := s.prepare(ctx, r, b.mem)
		if err != nil {
			// Declared here, not for every record: errors.As moves its
			// target to the heap.
			var ue unencodable
			if !errors.As(err, &ue) {
				if cerr := ctx.Err(); cerr != nil {
					return nil, cerr
				}
				return nil, err
			}
			b.bad = append(b.bad, pipeline.RecordError{Index: i, Err: ue.err, Permanent: true})
			continue
		}
		p := s.pendingOf(i, r, recs)
		b.work = append(b.work, p)
		b.f.produce(ctx, s.client, p)
	}
	for _, f := range b.bad {
		r := &records[f.Index]
		// Invariant 9: every record that is dead-lettered is logged.
		s.log.Warn("record cannot be encoded", zap.Int("index", f.Index), zap.String("table", tableName(r)),
			zap.String("version", r.Version.String()), zap.Bool("dlq_topic", s.opts.DLQTopic != ""), zap.Error(f.Err))
	}
	// Invariant 7: an unencodable record is never dropped: it goes to the
	// DLQ topic, or back to the runtime as a permanent failure.
	if s.opts.DLQTopic != "" {
		for _, f := range b.bad {
			p := pending{idx: f.Index, recs: []*kgo.Record{s.deadLetter(&records[f.Index], f.Err)}}
			b.work = append(b.work, p)
			b.f.produce(ctx, s.client, p)
		}
		b.bad = nil
	}
	b.f.seal()
	b.settle(ctx)
	return b, nil
}

// batch is a started non-transactional write (pipeline.Pending).
type batch struct {
	s    *Sink
	f    *flight
	work []pending
	bad  []pipeline.RecordError // permanent failures found while encoding
	mem  *slab                  // the records' memory, released by Err

	done    chan struct{}
	expired error // ctx's error when it ended before every promise fired
	judged  sync.Once
	err     error // the verdict, once judged
}

// settle closes done once every promise fired or ctx ended, whichever
// comes first: the runtime's write timeout bounds a started write as it
// bounds Write (a broker that accepts connections but never answers
// would otherwise hold the batch until the producer's own timeouts).
// Records still buffered then fail with ctx's error; those already sent
// may land, before anything produced later to their partition, so a
// retry only duplicates them.
func (b *batch) settle(ctx context.Context) {
	b.done = make(chan struct{})
	go func() {
		defer close(b.done)
		select {
		case <-b.f.done:
		case <-ctx.Done():
			select {
			case <-b.f.done: // both: the promises' outcome wins
			default:
				b.expired = ctx.Err()
			}
		}
	}()
}

func (b *batch) Done() <-chan struct{} { return b.done }

// release returns the records' memory once every promise fired and
// judge read the outcome: nothing refers to the records any more (the
// errors kept are the promises', not the records).
func (b *batch) release() {
	for i := range b.work {
		b.work[i].recs = nil
	}
	if b.mem != nil {
		b.mem.release()
		b.mem = nil
	}
}

// Err classifies the promises' errors (judge) once Done is closed, or is
// ctx's error when the write was abandoned.
func (b *batch) Err() error {
	if b.expired != nil {
		return b.expired // records may still be buffered: their memory is not released
	}
	b.judged.Do(func() { b.err = b.judge() })
	return b.err
}

// judge is Err's verdict, once: the records' memory is released after it.
func (b *batch) judge() error {
	refused, err := b.s.judge(b.work, b.f.result(b.work))
	b.release()
	if err != nil {
		return err
	}
	bad := b.bad
	for _, p := range b.work {
		if e, ok := refused[p.idx]; ok {
			bad = append(bad, pipeline.RecordError{Index: p.idx, Err: fmt.Errorf("broker refused the record: %w", e), Permanent: true})
		}
	}
	if len(bad) > 0 {
		sort.Slice(bad, func(i, j int) bool { return bad[i].Index < bad[j].Index })
		return &pipeline.BatchError{Failed: bad}
	}
	// Invariant 1: nil only now, with every promise of the batch succeeded
	// (acks=all), so the ledger may advance past these records.
	return nil
}

func (s *Sink) produce(ctx context.Context, work []pending) (map[int]error, error) {
	f := newFlight()
	for _, p := range work {
		f.produce(ctx, s.client, p)
	}
	f.seal()
	select {
	case <-f.done:
		return f.result(work), nil
	case <-ctx.Done():
		// Records still buffered fail with ctx's error; those already sent
		// may land, which a retry after restart only duplicates.
		return nil, ctx.Err()
	}
}

// flight collects the produce promises of one batch: per record index,
// the first error any of its Kafka records met. After seal, done is
// closed once every promise fired. Every record shares one promise (one
// closure a batch, not one a record): a failed record is kept by
// pointer, and result finds its index.
type flight struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	failed  map[*kgo.Record]error
	done    chan struct{}
	promise func(*kgo.Record, error)
}

func newFlight() *flight {
	f := &flight{done: make(chan struct{})}
	f.promise = func(r *kgo.Record, err error) {
		if err != nil {
			f.mu.Lock()
			if f.failed == nil {
				f.failed = map[*kgo.Record]error{}
			}
			f.failed[r] = err
			f.mu.Unlock()
		}
		f.wg.Done()
	}
	return f
}

// produce hands p's records to the client (blocking only while the
// client's buffer is full).
func (f *flight) produce(ctx context.Context, c *kgo.Client, p pending) {
	for _, rec := range p.recs {
		f.wg.Add(1)
		c.Produce(ctx, rec, f.promise)
	}
}

// seal ends the batch: done closes once every promise produced so far
// fired.
func (f *flight) seal() {
	go func() { f.wg.Wait(); close(f.done) }()
}

// result returns the errors by the index of work's record, the first
// of its Kafka records' errors; call it after done closed.
func (f *flight) result(work []pending) map[int]error {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := map[int]error{}
	if len(f.failed) == 0 {
		return errs
	}
	for _, p := range work {
		for _, rec := range p.recs {
			if err, ok := f.failed[rec]; ok {
				if _, had := errs[p.idx]; !had {
					errs[p.idx] = err
				}
			}
		}
	}
	return errs
}

// topicsOf lists the topic templates record r goes to ("" is the sink's
// own): the one it is written to, then those that take a delete of its
// key (pipeline.Dest).
func topicsOf(r *pipeline.Record) []string {
	if r.Dest == nil || r.Dest.Topic == "" && len(r.Dest.AwayTopics) == 0 {
		return ownTopic
	}
	return append([]string{r.Dest.Topic}, r.Dest.AwayTopics...)
}

var ownTopic = []string{""}

// prepare encodes one data record into its Kafka records: those of its
// topic (prepareTo), then, when its Dest sends it away from other topics
// of a route, a delete of its key (or the truncate) in each of them.
func (s *Sink) prepare(ctx context.Context, r *pipeline.Record, mem *slab) ([]*kgo.Record, error) {
	if r.Table == nil {
		return nil, unencodable{errors.New("data record without a table")}
	}
	if r.Op == pipeline.OpTruncate && r.Replaces {
		// A re-read's sweep (Invariant 14) follows the rows it keeps; a
		// consumer, which applies a truncate without comparing versions,
		// would drop them too. Rows it would remove stay in the topic
		// until their key's next change or a repair (README: Incremental
		// snapshots).
		s.log.Debug("re-read sweep not written to Kafka", zap.String("table", r.Table.ID.String()))
		return nil, nil
	}
	topics := topicsOf(r)
	recs, err := s.prepareTo(ctx, r, topics[0], mem)
	if err != nil || len(topics) == 1 {
		return recs, err
	}
	all := append([]*kgo.Record(nil), recs...)
	gone := *r
	if gone.Op != pipeline.OpTruncate {
		gone = r.AsDelete()
	}
	for _, topic := range topics[1:] {
		more, err := s.prepareTo(ctx, &gone, topic, mem)
		if err != nil {
			return nil, err
		}
		all = append(all, more...)
	}
	return all, nil
}

// prepareTo encodes one data record into its Kafka records in the topic
// of template topic ("": the sink's own): the event (a truncate has no
// key, like Debezium's), then for a delete a tombstone with the same key
// when Tombstones is on. Every record carries the headers sluice.version
// (hex, ordered like versions) and sluice.op. The records and their bytes
// come from mem.
func (s *Sink) prepareTo(ctx context.Context, r *pipeline.Record, topic string, mem *slab) ([]*kgo.Record, error) {
	sh, err := s.shapeOf(ctx, r.Table, topic)
	if err != nil {
		return nil, err
	}
	var key []byte
	if sh.keyID != 0 && r.Op != pipeline.OpTruncate {
		b := mem.buf()
		from := len(b)
		b, err := sh.codec.AppendKey(schema.AppendFrame(b, sh.keyID), r)
		if err != nil {
			return nil, unencodable{err}
		}
		key = mem.done(b, from)
	}
	if key == nil && sh.state.compacted && r.Op == pipeline.OpTruncate && r.Snapshot {
		// An initial load's barrier has no key; a compacted topic cannot
		// hold it, and the load's rows follow anyway. Keys that an
		// interrupted earlier load wrote and the source has since deleted
		// stay in the topic until a tombstone comes (see README).
		s.log.Debug("snapshot truncate barrier not written to a compacted topic", zap.String("topic", sh.topic))
		return nil, nil
	}
	if key == nil && sh.state.compacted {
		what := "a table without key columns"
		if r.Op == pipeline.OpTruncate {
			what = "a truncate event"
		}
		return nil, unencodable{fmt.Errorf("topic %s is compacted and refuses records without a key (%s)", sh.topic, what)}
	}
	// A value Avro cannot hold (a decimal NaN, a multi-dimensional
	// array) in a nullable column is written as null, and an after
	// image's one travels in a header in its text form, so the row lands
	// whole (README: Avro fallbacks).
	var text []int
	fb := func(before bool, col int) {
		if !before {
			text = append(text, col)
		}
	}
	b := mem.buf()
	from := len(b)
	b = schema.AppendFrame(b, sh.valueID)
	if s.opts.Envelope == EnvelopeRow {
		if r.Op == pipeline.OpTruncate {
			return nil, unencodable{errors.New("the row envelope has no form for a truncate (use the debezium envelope)")}
		}
		b, err = sh.codec.AppendValueFallback(b, r, fb)
	} else {
		b, err = sh.codec.AppendEnvelopeFallback(b, r, mem.source(s.opts.Version), fb)
	}
	if err != nil {
		return nil, unencodable{err}
	}
	val := mem.done(b, from)
	b = mem.buf()
	from = len(b)
	version := mem.done(r.Version.AppendHex(b), from)
	headers := mem.headers(2)
	headers[0] = kgo.RecordHeader{Key: headerVersion, Value: version}
	headers[1] = kgo.RecordHeader{Key: headerOp, Value: opBytes(r.Op)}
	for _, col := range text {
		c := &r.Table.Columns[col]
		t, err := textform.Encode(c, r.After[col])
		if err != nil {
			return nil, unencodable{fmt.Errorf("column %s: %w", c.Name, err)}
		}
		headers = append(headers, kgo.RecordHeader{Key: headerText + c.Name, Value: []byte(t)})
	}
	event := mem.record()
	event.Topic, event.Key, event.Value, event.Headers = sh.topic, key, val, headers
	event.Timestamp = mem.source(s.opts.Version).ProcessedAt
	if r.Op == pipeline.OpDelete && s.opts.Tombstones && key != nil {
		tomb := mem.record()
		tomb.Topic, tomb.Key, tomb.Headers, tomb.Timestamp = sh.topic, key, headers, event.Timestamp
		return mem.list(event, tomb), nil
	}
	return mem.list(event), nil
}

// pendingOf is the pending of input record i, r, encoded as recs; s.mu
// is held (r's shape is resolved).
func (s *Sink) pendingOf(i int, r *pipeline.Record, recs []*kgo.Record) pending {
	p := pending{idx: i, recs: recs, table: r.Table}
	if sh := s.shapes[shapeKey{r.Table, topicsOf(r)[0]}]; sh != nil {
		p.topic = sh.state
	}
	return p
}

// deadLetter is the DLQTopic record of an unencodable record.
func (s *Sink) deadLetter(r *pipeline.Record, cause error) *kgo.Record {
	return &kgo.Record{Topic: s.opts.DLQTopic, Key: []byte(tableName(r)), Value: pipeline.MarshalRecord(r),
		Headers: []kgo.RecordHeader{
			{Key: headerError, Value: []byte(cause.Error())},
			{Key: headerTable, Value: []byte(tableName(r))},
			{Key: headerOp, Value: []byte(r.Op.String())},
			{Key: headerVersion, Value: []byte(r.Version.String())},
			{Key: headerSink, Value: []byte(s.opts.Name)},
		}}
}

// opHeaders are the op header values, shared by every record (the client
// never writes to a header value).
var opHeaders = func() (h [pipeline.OpHeartbeat + 1][]byte) {
	for op := range h {
		h[op] = []byte(pipeline.Op(op).String())
	}
	return h
}()

func opBytes(op pipeline.Op) []byte {
	if int(op) < len(opHeaders) {
		return opHeaders[op]
	}
	return []byte(op.String())
}

func tableName(r *pipeline.Record) string {
	if r.Table == nil {
		return ""
	}
	return r.Table.ID.String()
}

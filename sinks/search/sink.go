package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// Sink keeps one OpenSearch or Elasticsearch index per captured table in
// step with the table's rows, idempotently (Invariant 4; see the package
// documentation). It implements pipeline.Sink; Write calls are serialized.
type Sink struct {
	opts      Options
	log       *zap.Logger
	now       func() time.Time
	overrides map[string]*override

	mu  sync.Mutex
	eng engine
	// unsignedLong: the engine maps unsigned_long (OpenSearch; an
	// Elasticsearch with its unsigned-long module).
	unsignedLong bool
	names        map[pipeline.TableID]nameResult
	owners       map[string]pipeline.TableID // index name → the table writing it
	indices      map[string]*indexState
	purger       upsert.Purge
	// generation is the versions' generation recorded in the state index
	// (Invariant 10; not the shape generation of indexState.gen).
	generation upsert.Generation
	// page is the number of hits per scroll page (scrollPage; tests
	// lower it).
	page int
}

var _ pipeline.Sink = (*Sink)(nil)

type nameResult struct {
	name string
	err  error
}

// indexState is what the sink knows of one target index.
type indexState struct {
	name   string
	table  string
	fields map[string]bool // mapped top-level fields
	// barrier is the highest truncate version (Invariant 4: records below
	// it change nothing); hasBarrier is false before the first truncate.
	barrier    pipeline.Version
	hasBarrier bool
	// snapshotAt is the last time a snapshot record of the table was
	// written, as stored (to the minute).
	snapshotAt time.Time
	// gen and genCols are the newest shape of the table this sink wrote
	// (its generation and the columns of the batch that had it).
	gen     int
	genCols []pipeline.Column
	// pending holds the added columns whose missing values may not be in
	// every document yet (missing.go).
	pending map[string]bool
}

func (st *indexState) barrierHex() string {
	if !st.hasBarrier {
		return ""
	}
	return st.barrier.String()
}

// New returns an unopened Sink. A nil logger logs nothing.
func New(opts Options, log *zap.Logger) *Sink {
	opts.setDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	s := &Sink{opts: opts, log: log.With(zap.String("sink", opts.Name)), now: time.Now, page: scrollPage}
	s.purger = upsert.Purge{HardDelete: opts.TombstoneTTL > 0, TTL: opts.TombstoneTTL}
	return s
}

// Open validates the options, connects and creates the state index when
// absent. It may be retried; opening an open Sink does nothing. Invalid
// options and a kind that does not match the server are Fatal.
func (s *Sink) Open(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eng != nil {
		return nil
	}
	overrides, err := s.opts.validate()
	if err != nil {
		return pipeline.Fatal(err)
	}
	eng, err := newEngine(&s.opts)
	if err != nil {
		return pipeline.Fatal(fmt.Errorf("search sink %s: %w", s.opts.Name, err))
	}
	s.eng, s.overrides = eng, overrides
	if err := s.ensureStateIndex(ctx); err != nil {
		eng.close()
		s.eng = nil
		err = fmt.Errorf("search sink %s: open %v: %w", s.opts.Name, s.opts.URLs, err)
		if isWrongProduct(err) {
			return pipeline.Fatal(err)
		}
		return s.ctxErr(ctx, err)
	}
	if err := s.loadGeneration(ctx); err != nil {
		eng.close()
		s.eng = nil
		return s.ctxErr(ctx, fmt.Errorf("search sink %s: %w", s.opts.Name, err))
	}
	s.unsignedLong = s.probeUnsignedLong(ctx)
	s.names = map[pipeline.TableID]nameResult{}
	s.owners = map[string]pipeline.TableID{}
	s.indices = map[string]*indexState{}
	s.log.Info("search sink open", zap.String("kind", s.opts.Kind), zap.Strings("urls", s.opts.URLs),
		zap.String("state_index", s.opts.StateIndex))
	return nil
}

// Close releases the clients; Write already made everything durable.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eng != nil {
		s.eng.close()
		s.eng = nil
	}
	return nil
}

// call runs one request with the Timeout and turns non-2xx replies into
// errors (a status in okStatus is accepted too).
func (s *Sink) call(ctx context.Context, what, method, path string, query url.Values, body []byte, okStatus ...int) (int, []byte, error) {
	return s.callOn(ctx, s.eng, what, method, path, query, body, okStatus...)
}

// callOn is call through eng: for a request made without s.mu, with the
// engine taken under it (Close clears s.eng).
func (s *Sink) callOn(ctx context.Context, eng engine, what, method, path string, query url.Values, body []byte, okStatus ...int) (int, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	status, resp, err := eng.do(rctx, method, path, query, body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", what, err)
	}
	if status/100 == 2 {
		return status, resp, nil
	}
	for _, ok := range okStatus {
		if status == ok {
			return status, resp, nil
		}
	}
	return status, resp, replyError(what, status, resp)
}

// ctxErr prefers ctx's error when ctx is done.
func (s *Sink) ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

func (s *Sink) ensureStateIndex(ctx context.Context) error {
	name := s.opts.StateIndex
	status, _, err := s.call(ctx, "state index "+name, http.MethodGet, "/"+url.PathEscape(name)+"/_mapping", nil, nil, 404)
	if err != nil || status != 404 {
		return err
	}
	body := `{"settings":{"index":{"translog":{"durability":"request"}}},"mappings":{"dynamic":false,"properties":{` +
		`"index":{"type":"keyword"},"table":{"type":"keyword"},"barrier":{"type":"keyword"},` +
		`"snapshot_at":{"type":"date"},"created_at":{"type":"date"}}}}`
	status, resp, err := s.call(ctx, "create state index "+name, http.MethodPut, "/"+url.PathEscape(name), nil, []byte(body), 400)
	if err == nil && status == 400 && !strings.Contains(string(resp), "resource_already_exists_exception") {
		err = replyError("create state index "+name, status, resp)
	}
	return err
}

// probeUnsignedLong reports whether the engine maps unsigned_long: always
// on OpenSearch; on Elasticsearch when the node lists the module (an
// unanswered probe assumes a standard distribution, which has it).
func (s *Sink) probeUnsignedLong(ctx context.Context) bool {
	if s.opts.Kind == KindOpenSearch {
		return true
	}
	_, body, err := s.call(ctx, "nodes info", http.MethodGet, "/_nodes/_local",
		url.Values{"filter_path": {"nodes.*.modules.name"}}, nil)
	if err != nil || !strings.Contains(string(body), `"modules"`) {
		return true
	}
	return strings.Contains(string(body), "unsigned-long")
}

// target names a table's index ("" when its name is invalid; see names).
func (s *Sink) target(id pipeline.TableID) string {
	r, ok := s.names[id]
	if !ok {
		r.name, r.err = indexName(s.opts.IndexTemplate, id)
		if r.err == nil {
			// Two tables in one index would write the same document ids,
			// and their versions are not comparable (Invariant 4).
			if other, taken := s.owners[r.name]; taken && other != id {
				r.err = pipeline.Fatal(fmt.Errorf("tables %s and %s both map to index %q: change index_template so that "+
					"every table has its own index", other, id, r.name))
			} else {
				s.owners[r.name] = id
			}
		}
		s.names[id] = r
	}
	return r.name
}

// indexFor returns the state of tb's index: created with the derived
// mapping when absent, with the batch's new columns added, its barrier
// and snapshot mark loaded. A *tableError is a refusal of the table that
// no retry can change (Write quarantines it: tableFailure).
func (s *Sink) indexFor(ctx context.Context, tb *upsert.TableBatch) (*indexState, error) {
	if r := s.names[tb.ID]; r.err != nil {
		if pipeline.IsFatal(r.err) {
			return nil, r.err
		}
		return nil, &tableError{r.err}
	}
	for i := range tb.Cols {
		if n := tb.Cols[i].Name; n == "" || strings.HasPrefix(n, metaPrefix) {
			return nil, &tableError{fmt.Errorf("%w: column name %q is empty or reserved for the sink's fields", errInvalid, n)}
		}
	}
	st := s.indices[tb.Target]
	if st == nil {
		var err error
		if st, err = s.loadIndex(ctx, tb); err != nil {
			return nil, err
		}
		s.indices[tb.Target] = st
	}
	var missing []int
	var fill []string
	for i := range tb.Cols {
		if !st.fields[tb.Cols[i].Name] {
			missing = append(missing, i)
			if tb.Cols[i].Missing != nil {
				fill = append(fill, tb.Cols[i].Name)
			}
		}
	}
	if len(missing) == 0 {
		return st, s.fillPending(ctx, st, tb)
	}
	if len(fill) > 0 {
		// Step 1 of the fill (missing.go).
		for name := range st.pending {
			fill = append(fill, name)
		}
		if err := s.updateState(ctx, st, pendingDoc(fill)); err != nil {
			return nil, err
		}
		for _, name := range fill {
			st.pending[name] = true
		}
	}
	cols := make([]pipeline.Column, len(missing))
	isKey := make([]bool, len(missing))
	for k, i := range missing {
		cols[k], isKey[k] = tb.Cols[i], tb.IsKey[i]
	}
	props := properties(cols, isKey, s.overrides[tb.ID.String()], s.unsignedLong)
	body := mappingsBody(props, nil)
	status, resp, err := s.call(ctx, "add columns to "+st.name, http.MethodPut, "/"+url.PathEscape(st.name)+"/_mapping", nil, body, 400)
	if err != nil {
		return nil, err
	}
	if status == 400 {
		// The engine refuses the new columns' mapping (a broken override,
		// a type clash with the index, its field limit): a schema change
		// this index cannot take, not a property of some records.
		return nil, mappingRefused(replyError("add columns to index "+st.name+" for table "+st.table, status, resp))
	}
	for _, c := range cols {
		st.fields[c.Name] = true
	}
	s.log.Info("index columns added", zap.String("index", st.name), zap.Int("columns", len(cols)))
	return st, s.fillPending(ctx, st, tb)
}

// tableError is a refusal of one table that no retry can change.
type tableError struct{ err error }

func (e *tableError) Error() string { return e.err.Error() }
func (e *tableError) Unwrap() error { return e.err }

// loadIndex reads an index's mapping and state, creating the index when
// it does not exist.
func (s *Sink) loadIndex(ctx context.Context, tb *upsert.TableBatch) (*indexState, error) {
	st := &indexState{name: tb.Target, table: tb.ID.String(), fields: map[string]bool{}, pending: map[string]bool{}}
	path := "/" + url.PathEscape(st.name)
	status, body, err := s.call(ctx, "mapping of "+st.name, http.MethodGet, path+"/_mapping", nil, nil, 404)
	if err != nil {
		return nil, err
	}
	if status == 404 {
		created, err := s.createIndex(ctx, tb, st)
		if err != nil || created {
			return st, err
		}
		if _, body, err = s.call(ctx, "mapping of "+st.name, http.MethodGet, path+"/_mapping", nil, nil); err != nil {
			return nil, err
		}
	}
	if err := s.checkDurability(ctx, st.name); err != nil {
		return nil, err
	}
	var m map[string]struct {
		Mappings struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"mappings"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("mapping of %s: %w", st.name, err)
	}
	for _, idx := range m {
		for f := range idx.Mappings.Properties {
			st.fields[f] = true
		}
	}
	status, body, err = s.call(ctx, "state of "+st.name, http.MethodGet, s.statePath(st.name), nil, nil, 404)
	if err != nil {
		return nil, err
	}
	if status == 200 {
		var doc struct {
			Source struct {
				Barrier     string    `json:"barrier"`
				SnapshotAt  time.Time `json:"snapshot_at"`
				PendingFill []string  `json:"pending_fill"`
			} `json:"_source"`
		}
		if err := json.Unmarshal(body, &doc); err != nil {
			return nil, fmt.Errorf("state of %s: %w", st.name, err)
		}
		if doc.Source.Barrier != "" {
			if st.barrier, err = pipeline.ParseVersion(doc.Source.Barrier); err != nil {
				return nil, fmt.Errorf("state of %s: barrier: %w", st.name, err)
			}
			st.hasBarrier = true
		}
		st.snapshotAt = doc.Source.SnapshotAt
		for _, name := range doc.Source.PendingFill {
			st.pending[name] = true
		}
	}
	// Keeps the alias in step with the barrier.
	if err := s.putAlias(ctx, st); err != nil {
		return nil, err
	}
	return st, nil
}

// checkDurability refuses an existing index whose translog is fsynced
// asynchronously: its acknowledged writes could be lost in a crash, so a
// checkpoint after them would lose data (Invariant 1).
func (s *Sink) checkDurability(ctx context.Context, index string) error {
	_, body, err := s.call(ctx, "settings of "+index, http.MethodGet, "/"+url.PathEscape(index)+"/_settings",
		url.Values{"filter_path": {"*.settings.index.translog.durability"}}, nil)
	if err != nil {
		return err
	}
	if strings.Contains(strings.ToLower(string(body)), `"async"`) {
		return pipeline.Fatal(fmt.Errorf("index %s has index.translog.durability=async: an acknowledged write is not "+
			"durable; set it to request (PUT /%s/_settings {\"index.translog.durability\":\"request\"})", index, index))
	}
	return nil
}

// createIndex creates tb's index with the derived mapping (and the
// override), the live alias and a fresh state document. It reports false
// when another writer created the index first.
func (s *Sink) createIndex(ctx context.Context, tb *upsert.TableBatch, st *indexState) (bool, error) {
	ov := s.overrides[tb.ID.String()]
	props := properties(tb.Cols, tb.IsKey, ov, s.unsignedLong)
	body := []byte(`{"settings":{"index":{"translog":{"durability":"request"}}},"mappings":`)
	body = append(body, mappingsBody(props, ov)...)
	body = jsontext.AppendString(append(body, `,"aliases":{`...), st.name+s.opts.AliasSuffix)
	body = append(append(append(body, `:{"filter":`...), liveFilter("")...), `}}`...)
	body = append(body, '}')
	// A new index starts without barrier, so a stale state document of a
	// deleted index of the same name is replaced — before the index
	// exists: written after it, a crash in between would leave the old
	// barrier in force over the new index, silently dropping records below
	// it (Invariant 4 guards against older records, not against a barrier
	// that belongs to another index). Only one writer per index is
	// supported, so no other writer's barrier is reset here.
	state := jsontext.AppendString([]byte(`{"index":`), st.name)
	state = jsontext.AppendString(append(state, `,"table":`...), st.table)
	state = jsontext.AppendString(append(state, `,"created_at":`...), formatTime(s.now()))
	state = append(state, '}')
	if _, _, err := s.call(ctx, "state of "+st.name, http.MethodPut, s.statePath(st.name), nil, state); err != nil {
		return false, err
	}
	status, resp, err := s.call(ctx, "create index "+st.name, http.MethodPut, "/"+url.PathEscape(st.name), nil, body, 400)
	if err != nil {
		return false, err
	}
	if status == 400 {
		if strings.Contains(string(resp), "resource_already_exists_exception") {
			return false, nil
		}
		// A mapping or settings the engine refuses (a broken override):
		// the table cannot have its index, whatever its records hold.
		return false, mappingRefused(replyError("create index "+st.name+" for table "+st.table, status, resp))
	}
	for _, n := range append([]string{fieldVersion, fieldDeleted, fieldAt}, keysOf(props)...) {
		st.fields[n] = true
	}
	s.log.Info("index created", zap.String("index", st.name), zap.String("table", st.table), zap.Int("columns", len(props)))
	return true, nil
}

func keysOf(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (s *Sink) statePath(index string) string {
	return "/" + url.PathEscape(s.opts.StateIndex) + "/_doc/" + url.PathEscape(index)
}

// putAlias (re)defines the index's live alias with the current barrier.
func (s *Sink) putAlias(ctx context.Context, st *indexState) error {
	body := append(append([]byte(`{"filter":`), liveFilter(st.barrierHex())...), '}')
	_, _, err := s.call(ctx, "alias of "+st.name, http.MethodPut,
		"/"+url.PathEscape(st.name)+"/_alias/"+url.PathEscape(st.name+s.opts.AliasSuffix), nil, body)
	return err
}

// updateState merges fields into an index's state document.
func (s *Sink) updateState(ctx context.Context, st *indexState, doc []byte) error {
	body := append(append([]byte(`{"doc":`), doc...), `,"doc_as_upsert":true}`...)
	_, _, err := s.call(ctx, "state of "+st.name, http.MethodPost,
		"/"+url.PathEscape(s.opts.StateIndex)+"/_update/"+url.PathEscape(st.name), nil, body)
	return err
}

// truncate raises the index's barrier to v (Invariant 4: a truncate is a
// versioned barrier): it stores the barrier, moves the live alias's filter
// to it and deletes the documents below it. Records below the barrier
// change nothing from then on; a truncate interrupted before its deletes
// finished is resumed by the retried batch (its version equals the
// stored barrier), and until then the alias hides what it left.
func (s *Sink) truncate(ctx context.Context, st *indexState, v pipeline.Version) error {
	if !st.hasBarrier || st.barrier.Less(v) {
		doc := jsontext.AppendString([]byte(`{"barrier":`), v.String())
		if err := s.updateState(ctx, st, append(doc, '}')); err != nil {
			return err
		}
		st.barrier, st.hasBarrier = v, true
	}
	if err := s.putAlias(ctx, st); err != nil {
		return err
	}
	query := `{"range":{"` + fieldVersion + `":{"lt":"` + v.String() + `"}}}`
	n, err := s.deleteMatching(ctx, st.name, query)
	if err != nil {
		return fmt.Errorf("truncate %s: %w", st.name, err)
	}
	s.log.Info("truncate barrier", zap.String("index", st.name), zap.String("version", v.String()), zap.Int("deleted", n))
	return nil
}

// errNotOpen is returned by calls before Open.
var errNotOpen = errors.New("search sink: used before open")

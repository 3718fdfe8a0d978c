package search

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// The bulk item answers of OpenSearch 2.19 and Elasticsearch 8.19 (the
// same on both), and the legacy form of the flood-stage block, sorted.
func TestClassifyItem(t *testing.T) {
	for _, c := range []struct {
		status      int
		typ, reason string
		want        itemClass
		what        string
	}{
		{400, "mapper_parsing_exception", "failed to parse field [note] of type [integer]", itemPermanent, "a value the mapping rejects"},
		{400, "document_parsing_exception", "[1:20] failed to parse field [name] of type [date]", itemPermanent, "a value the mapping rejects"},
		{400, "illegal_argument_exception", "Limit of total fields [2] has been exceeded while adding new fields [1]", itemPermanent, "a document the index cannot take"},
		{400, "index_closed_exception", "closed", itemTable, "a closed index"},
		{403, "cluster_block_exception", "index [ex1] blocked by: [FORBIDDEN/8/index write (api)];", itemTable, "index.blocks.write"},
		{403, "cluster_block_exception", "index [ex1] blocked by: [FORBIDDEN/5/index read-only (api)];", itemTable, "index.blocks.read_only"},
		{429, "cluster_block_exception", "index [ex1] blocked by: [TOO_MANY_REQUESTS/12/disk usage exceeded flood-stage watermark, index has read-only-allow-delete block];",
			itemTransient, "the flood-stage disk block"},
		{403, "cluster_block_exception", "index [ex1] blocked by: [FORBIDDEN/12/index read-only / allow delete (api)];", itemTransient, "the legacy flood-stage block"},
		{403, "cluster_block_exception", "blocked by: [FORBIDDEN/6/cluster read-only (api)];", itemTransient, "a cluster-wide block"},
		{403, "security_exception", "action [indices:data/write/bulk[s]] is unauthorized for user [sluice]", itemTransient, "a permission"},
		{429, "es_rejected_execution_exception", "rejected execution of coordinating operation", itemOverloaded, "a full write queue"},
		{404, "index_not_found_exception", "no such index [t1-public.acct]", itemMissing, "a deleted index"},
		{503, "unavailable_shards_exception", "primary shard is not active", itemTransient, "an unavailable shard"},
		{500, "", "", itemTransient, "an error without a body"},
	} {
		e := &engineError{Type: c.typ, Reason: c.reason}
		if c.typ == "" {
			e = nil
		}
		if got := classifyItem(c.status, e); got != c.want {
			t.Errorf("%d %s (%s): class %d, want %d", c.status, c.typ, c.what, got, c.want)
		}
	}
}

// replyEngine answers every bulk request with one status and body.
type replyEngine struct {
	status int
	body   string
}

func (e *replyEngine) do(context.Context, string, string, url.Values, []byte) (int, []byte, error) {
	return 200, []byte(`{}`), nil
}

func (e *replyEngine) bulk(context.Context, []byte, bool) (int, []byte, error) {
	return e.status, []byte(e.body), nil
}

func (e *replyEngine) close() {}

// A request refused as too large (413) is TooLarge; one refused (429) or
// with an item refused (es_rejected_execution_exception) for a full queue
// is Overloaded; the flood-stage block is neither.
func TestRequestRefusals(t *testing.T) {
	item := func(status int, typ string) string {
		return `{"errors":true,"items":[{"index":{"status":` + strconv.Itoa(status) + `,"error":{"type":"` + typ + `","reason":"r"}}}]}`
	}
	for _, c := range []struct {
		status               int
		body                 string
		tooLarge, overloaded bool
	}{
		{http.StatusRequestEntityTooLarge, ``, true, false},
		{http.StatusTooManyRequests, `{"error":{"type":"es_rejected_execution_exception","reason":"rejected"},"status":429}`, false, true},
		{http.StatusOK, item(429, "es_rejected_execution_exception"), false, true},
		{http.StatusOK, item(429, "cluster_block_exception"), false, false},
	} {
		s := New(Options{Kind: KindOpenSearch, URLs: []string{"http://127.0.0.1:1"}}, nil)
		s.eng = &replyEngine{c.status, c.body}
		res := s.sendChunk(ctx, &chunkReq{body: []byte("{}\n"), ops: []*op{{st: &indexState{name: "i"}, id: "1"}}})
		err := res.err
		if err == nil {
			err = res.transient
		}
		if err == nil || pipeline.IsTooLarge(err) != c.tooLarge || pipeline.IsOverloaded(err) != c.overloaded {
			t.Errorf("%d %s: %v: want too large %v, overloaded %v", c.status, c.body, err, c.tooLarge, c.overloaded)
		}
	}
}

// wantTableError fails unless err is a *pipeline.TableError of table whose
// message holds want.
func wantTableError(t *testing.T, err error, table pipeline.TableID, want string) {
	t.Helper()
	var te *pipeline.TableError
	if !errors.As(err, &te) || te.Table != table || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v (%T), want a *pipeline.TableError of %s saying %q", err, err, table, want)
	}
	t.Logf("refused: %v", err)
}

// testIndexRefusals: a table whose index the engine will not take — a
// mapping override it refuses at creation, new columns past the index's
// field limit, a reserved column name, an index an operator blocked for
// writes or closed — fails with a *pipeline.TableError of that table
// alone, and the other tables go on; the flood-stage disk block is
// retried and passes once lifted.
func testIndexRefusals(t *testing.T, n *harness.SearchNode) {
	broken := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "broken"}, Columns: acct.Columns, KeyIdx: []int{0}, Generation: 1}
	s := openSink(t, target(n, Options{Mappings: map[string]json.RawMessage{
		"public.broken": json.RawMessage(`{"properties":{"name":{"type":"nosuchtype"}}}`)}}))
	other := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "other"}, Columns: acct.Columns, KeyIdx: []int{0}, Generation: 1}
	as := func(tbl *pipeline.Table, r pipeline.Record) pipeline.Record {
		r.Table = tbl
		return r
	}
	minor := uint64(1)
	next := func(tbl *pipeline.Table) pipeline.Record {
		minor++
		return as(tbl, row(pipeline.OpInsert, minor, int64(minor), "x", nil))
	}
	// refused writes rec with a record of other first: rec's table is
	// refused, other is written by the next Write.
	refused := func(rec pipeline.Record, want string) {
		t.Helper()
		wantTableError(t, s.Write(ctx, []pipeline.Record{next(other), rec}), rec.Table.ID, want)
		mustWrite(t, s, next(other))
	}
	index := indexOf(s, acct)
	call := func(method, path, body string) {
		t.Helper()
		if _, _, err := s.call(ctx, "test", method, "/"+url.PathEscape(index)+path, nil, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, s, next(acct), next(other))

	refused(next(broken), "nosuchtype")
	reserved := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "reserved"}, KeyIdx: []int{0}, Generation: 1,
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: metaPrefix + "x", Type: pipeline.TypeString}}}
	refused(pipeline.Record{Op: pipeline.OpInsert, Table: reserved, After: []any{int64(1), "x"}, Version: pipeline.Version{0, 100, 0, 1}}, "reserved")

	call(http.MethodPut, "/_settings", `{"index.mapping.total_fields.limit":1}`)
	v2 := &pipeline.Table{ID: acct.ID, Generation: 2, KeyIdx: []int{0},
		Columns: append(append([]pipeline.Column{}, acct.Columns...), pipeline.Column{Name: "score", Type: pipeline.TypeInt32, Nullable: true})}
	minor++
	refused(pipeline.Record{Op: pipeline.OpInsert, Table: v2, After: []any{int64(minor), "x", nil, int64(1)}, Version: pipeline.Version{0, 100, 0, minor}},
		"Limit of total fields")
	call(http.MethodPut, "/_settings", `{"index.mapping.total_fields.limit":null}`)

	call(http.MethodPut, "/_settings", `{"index.blocks.write":true}`)
	refused(next(acct), "index.blocks.write")
	call(http.MethodPut, "/_settings", `{"index.blocks.write":false}`)

	call(http.MethodPut, "/_settings", `{"index.blocks.read_only_allow_delete":true}`)
	err := s.Write(ctx, []pipeline.Record{next(acct)})
	call(http.MethodPut, "/_settings", `{"index.blocks.read_only_allow_delete":false}`)
	var be *pipeline.BatchError
	var te *pipeline.TableError
	if err == nil || errors.As(err, &be) || errors.As(err, &te) || pipeline.IsFatal(err) || pipeline.IsOverloaded(err) ||
		!strings.Contains(err.Error(), "flood-stage") {
		t.Fatalf("flood-stage block: err = %v (%T), want a plain transient error", err, err)
	}
	mustWrite(t, s, as(acct, row(pipeline.OpInsert, minor, int64(minor), "x", nil)))

	call(http.MethodPost, "/_close", "")
	refused(next(acct), "is closed")
	// A sink opened on the closed index (a restart) refuses it too.
	s = openSink(t, s.opts)
	refused(next(acct), "is closed")
}

// testTooLarge: with http.max_content_length at maxContent (10mb), a bulk
// request above it is TooLarge, never a BatchError; its records pass in
// smaller writes; a record too large on its own is TooLarge alone (the
// runtime then dead-letters it).
func testTooLarge(t *testing.T, n *harness.SearchNode) {
	blobs := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "blobs"}, KeyIdx: []int{0}, Generation: 1,
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "data", Type: pipeline.TypeBytes}}}
	blob := func(id int64, size int) pipeline.Record {
		return pipeline.Record{Op: pipeline.OpInsert, Table: blobs, After: []any{id, make([]byte, size)}, Version: pipeline.Version{0, 100, 0, uint64(id)}}
	}
	s := openSink(t, target(n, Options{BulkMaxBytes: 64 << 20}))
	recs := []pipeline.Record{blob(1, 3<<20), blob(2, 3<<20), blob(3, 3<<20)} // 4 MiB each in base64
	wantTooLarge := func(err error) {
		t.Helper()
		var be *pipeline.BatchError
		if !pipeline.IsTooLarge(err) || errors.As(err, &be) {
			t.Fatalf("err = %v (%T), want TooLarge", err, err)
		}
		t.Logf("too large: %v", err)
	}
	wantTooLarge(s.Write(ctx, recs))
	for _, r := range recs {
		mustWrite(t, s, r)
	}
	wantTooLarge(s.Write(ctx, []pipeline.Record{blob(4, 8<<20)}))
	if got := readMap(t, s, blobs); len(got) != 3 {
		t.Fatalf("%d rows, want 3", len(got))
	}
}

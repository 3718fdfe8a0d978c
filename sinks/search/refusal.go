package search

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
)

// How a Write fails (see the package documentation):
//
//   - per record, permanently, in a *pipeline.BatchError: a document the
//     engine refuses for what it holds (a bulk item answered 400:
//     mapper_parsing_exception, document_parsing_exception,
//     illegal_argument_exception, …) and a value the sink cannot encode;
//   - per table, in a *pipeline.TableError, so the runtime quarantines the
//     table in this sink while the others go on: a table whose index the
//     engine will not take — an invalid index name or column name, a
//     mapping the engine refuses at creation or for added columns — and an
//     index an operator closed or blocked for writes;
//   - as a whole, for the runtime to retry: a request refused as too large
//     (HTTP 413, pipeline.TooLarge: written again in smaller pieces), a
//     full queue (429, es_rejected_execution_exception: pipeline.Overloaded),
//     the flood-stage disk watermark's read-only-allow-delete block (429,
//     lifted by the engine once disk is freed), 5xx, a missing index, a
//     lost connection, and any other answer.

// mappingRefused classifies the engine's 400 to an index creation or a
// mapping update: the cluster's shard limit (validation_exception) is
// lifted by the operator and retried; anything else is the mapping or the
// settings themselves, refused for good (a *tableError).
func mappingRefused(err error) error {
	var se *statusError
	if errors.As(err, &se) && strings.HasPrefix(se.msg, "validation_exception") {
		return err
	}
	return &tableError{err}
}

// tableFailure returns err, a failure to prepare or truncate table id's
// index, as a *pipeline.TableError when it concerns that index only and
// no retry can change it: a *tableError, or an error answer about an index
// that is closed (the engines answer some requests on a closed index with
// a 500). Otherwise it returns err.
func (s *Sink) tableFailure(ctx context.Context, id pipeline.TableID, index string, err error) error {
	if err == nil || ctx.Err() != nil || pipeline.IsFatal(err) {
		return err
	}
	var te *tableError
	if errors.As(err, &te) {
		return &pipeline.TableError{Table: id, Err: te.err}
	}
	// Only an engine that answered is asked again: one that did not
	// would only make the failed attempt longer.
	var se *statusError
	if errors.As(err, &se) && index != "" && s.isClosed(ctx, index) {
		return &pipeline.TableError{Table: id, Err: closedError(index, err.Error())}
	}
	return err
}

// isClosed reports whether the engine holds index, closed.
func (s *Sink) isClosed(ctx context.Context, index string) bool {
	_, body, err := s.call(ctx, "status of index "+index, http.MethodGet, "/_cat/indices/"+url.PathEscape(index),
		url.Values{"h": {"status"}, "format": {"json"}}, nil)
	return err == nil && strings.Contains(string(body), `"close"`)
}

func closedError(index, cause string) error {
	return fmt.Errorf("index %s is closed: open it (POST /%s/_open): %s", index, index, cause)
}

// itemClass is what one failed bulk item says about its document.
type itemClass int

const (
	itemTransient  itemClass = iota // the batch is retried
	itemOverloaded                  // retried in smaller pieces
	itemMissing                     // the index is gone: recreated by the retry
	itemPermanent                   // the document is refused for what it holds
	itemTable                       // the index refuses every document
)

// classifyItem sorts a bulk item answered status with e (nil when the
// engine gave no error body). Only a 400 dead-letters a record (Invariant
// 7); a 401/403 other than an index's own write block (a permission), a
// 5xx or anything unknown says nothing about the record or the table and
// is retried, so no good record is dead-lettered.
func classifyItem(status int, e *engineError) itemClass {
	var typ, reason string
	if e != nil {
		typ, reason = e.Type, e.Reason
	}
	switch {
	case typ == "index_closed_exception":
		return itemTable
	case typ == "cluster_block_exception" && status == http.StatusForbidden && indexWriteBlock(reason):
		return itemTable
	case status == http.StatusTooManyRequests && typ == "cluster_block_exception":
		// The flood-stage disk watermark's block: smaller writes do not
		// help, freed disk does (the engine then lifts the block).
		return itemTransient
	case status == http.StatusTooManyRequests:
		// es_rejected_execution_exception: the write queue is full;
		// smaller writes relieve it.
		return itemOverloaded
	case status == http.StatusNotFound:
		return itemMissing
	case status == http.StatusBadRequest:
		return itemPermanent
	}
	return itemTransient
}

// indexWriteBlock reports a cluster_block_exception reason naming a write
// block an operator set on the index itself (index.blocks.write or
// index.blocks.read_only: "index [x] blocked by: [FORBIDDEN/8/index write
// (api)];"), not a cluster-wide block and not the read-only-allow-delete
// block of the flood-stage disk watermark (id 12; FORBIDDEN on older
// engines), which the engine lifts by itself.
func indexWriteBlock(reason string) bool {
	return strings.HasPrefix(reason, "index [") && strings.Contains(reason, "FORBIDDEN/") && !strings.Contains(reason, "/12/")
}

// tableItemError is the *pipeline.TableError of a bulk item of o's index
// that classifyItem found to refuse every document.
func tableItemError(o *op, e *engineError) error {
	msg := e.String()
	if e.Type == "index_closed_exception" {
		return &pipeline.TableError{Table: o.tb.ID, Err: closedError(o.st.name, msg)}
	}
	return &pipeline.TableError{Table: o.tb.ID, Err: fmt.Errorf("index %s refuses writes: remove its write block "+
		"(index.blocks.write, index.blocks.read_only): %s", o.st.name, msg)}
}

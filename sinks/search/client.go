package search

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	elasticsearch "github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/esapi"
	opensearch "github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/sluice-cdc/sluice/internal/tlsconf"
)

// engine is what the sink needs of an official client: bulk requests
// through the client's bulk API and plain JSON requests through its
// transport (authentication, TLS, node selection). Everything else is
// shared. Retries are the runtime's: the clients do not retry.
type engine interface {
	// do sends method path?query with a JSON body (nil: none) and
	// returns the status and the response body.
	do(ctx context.Context, method, path string, query url.Values, body []byte) (int, []byte, error)
	// bulk sends an NDJSON bulk body.
	bulk(ctx context.Context, body []byte, refresh bool) (int, []byte, error)
	close()
}

// bulkFilter trims bulk responses to what the sink reads.
var bulkFilter = []string{"errors", "items.*.status", "items.*.error"}

func newEngine(o *Options) (engine, error) {
	tr, err := httpTransport(o)
	if err != nil {
		return nil, err
	}
	if o.Kind == KindOpenSearch {
		noDiscovery := false
		c, err := opensearch.NewClient(opensearch.Config{Addresses: o.URLs, Username: o.Username, Password: o.Password,
			Transport: tr, DisableRetry: true, DiscoverNodesOnStart: &noDiscovery})
		if err != nil {
			return nil, err
		}
		return &osEngine{c: c}, nil
	}
	c, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: o.URLs, Username: o.Username, Password: o.Password,
		APIKey: o.APIKey, Transport: tr, DisableRetry: true})
	if err != nil {
		return nil, err
	}
	return &esEngine{c: c}, nil
}

// httpTransport is the HTTP transport both clients use, with the TLS
// options.
func httpTransport(o *Options) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 8
	tr.ResponseHeaderTimeout = o.Timeout
	if o.CAFile == "" && !o.InsecureSkipVerify {
		return tr, nil
	}
	cfg, err := tlsconf.Config(o.CAFile, "", "", o.InsecureSkipVerify)
	if err != nil {
		return nil, err
	}
	tr.TLSClientConfig = cfg
	return tr, nil
}

// osEngine speaks to OpenSearch through opensearch-go.
type osEngine struct{ c *opensearch.Client }

// rawReq is an opensearch.Request for any path.
type rawReq struct {
	path  string
	query url.Values
	body  []byte
}

func (r rawReq) GetRequest(method string) (*http.Request, error) {
	u := r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		return nil, err
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

func (e *osEngine) do(ctx context.Context, method, path string, query url.Values, body []byte) (int, []byte, error) {
	return osResult(opensearch.Do(ctx, e.c, method, rawReq{path: path, query: query, body: body}, (*opensearch.NoBody)(nil)))
}

func (e *osEngine) bulk(ctx context.Context, body []byte, refresh bool) (int, []byte, error) {
	p := opensearchapi.BulkParams{FilterPath: bulkFilter}
	if refresh {
		p.Refresh = "true"
	}
	req := opensearchapi.BulkReq{Body: bytes.NewReader(body), Params: p,
		Header: http.Header{"Content-Type": {"application/x-ndjson"}}}
	return osResult(opensearch.Do(ctx, e.c, http.MethodPost, req, (*opensearch.NoBody)(nil)))
}

func osResult(resp *opensearch.Response, err error) (int, []byte, error) {
	if resp == nil {
		if err == nil {
			err = errors.New("no response")
		}
		return 0, nil, err
	}
	if resp.Body == nil {
		return resp.StatusCode, nil, err
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(resp.Body)
	if err == nil {
		err = rerr
	}
	if err == nil && resp.Header.Get("X-Elastic-Product") != "" {
		err = errWrongProduct
	}
	return resp.StatusCode, b, err
}

func (e *osEngine) close() { _ = e.c.Close() }

// esEngine speaks to Elasticsearch through go-elasticsearch.
type esEngine struct{ c *elasticsearch.Client }

func (e *esEngine) do(ctx context.Context, method, path string, query url.Values, body []byte) (int, []byte, error) {
	req, err := rawReq{path: path, query: query, body: body}.GetRequest(method)
	if err != nil {
		return 0, nil, err
	}
	resp, err := e.c.Perform(req.WithContext(ctx))
	if err != nil {
		return 0, nil, esError(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (e *esEngine) bulk(ctx context.Context, body []byte, refresh bool) (int, []byte, error) {
	req := esapi.BulkRequest{Body: bytes.NewReader(body), FilterPath: bulkFilter}
	if refresh {
		req.Refresh = "true"
	}
	resp, err := req.Do(ctx, e.c)
	if err != nil {
		return 0, nil, esError(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (e *esEngine) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.c.Close(ctx)
}

// errWrongProduct: the configured kind does not match the server.
var errWrongProduct = errors.New("the server is Elasticsearch, not OpenSearch: set kind to elasticsearch")

func esError(err error) error {
	if strings.Contains(err.Error(), "not Elasticsearch") {
		return fmt.Errorf("%w (set kind to opensearch if the server is OpenSearch)", err)
	}
	return err
}

// isWrongProduct reports a kind that does not match the server.
func isWrongProduct(err error) bool {
	return errors.Is(err, errWrongProduct) || strings.Contains(err.Error(), "not Elasticsearch")
}

// engineError is an error reply of the engine.
type engineError struct {
	Type     string       `json:"type"`
	Reason   string       `json:"reason"`
	CausedBy *engineError `json:"caused_by"`
}

// String renders the error and its causes in the engine's words:
// "type: reason; caused by type: reason".
func (e *engineError) String() string {
	var b strings.Builder
	for c, i := e, 0; c != nil && i < 4; c, i = c.CausedBy, i+1 {
		if i > 0 {
			b.WriteString("; caused by ")
		}
		b.WriteString(c.Type)
		if c.Reason != "" {
			b.WriteString(": ")
			b.WriteString(c.Reason)
		}
	}
	return b.String()
}

// replyError describes a failed request from its status and body.
func replyError(what string, status int, body []byte) error {
	var r struct {
		Error json.RawMessage `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &r) == nil && len(r.Error) > 0 {
		var e engineError
		if json.Unmarshal(r.Error, &e) == nil && e.Type != "" {
			msg = e.String()
		} else {
			msg = string(r.Error)
		}
	}
	if len(msg) > 2000 {
		msg = msg[:2000] + "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &statusError{what: what, status: status, msg: msg}
}

// statusError is an HTTP-level failure of a request.
type statusError struct {
	what   string
	status int
	msg    string
}

func (e *statusError) Error() string { return fmt.Sprintf("%s: HTTP %d: %s", e.what, e.status, e.msg) }

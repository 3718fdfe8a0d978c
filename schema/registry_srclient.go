package schema

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/riferrei/srclient"
)

// SRClientOptions configures the HTTP client of NewSRClient.
type SRClientOptions struct {
	// Username and Password enable HTTP basic authentication (both must be
	// set).
	Username, Password string
	// TLS configures HTTPS to the registry; nil uses the system defaults.
	TLS *tls.Config
	// Timeout bounds every HTTP request; zero means 10s.
	Timeout time.Duration
}

// Confluent REST error codes treated as "nothing registered yet".
const (
	srSubjectNotFound = 40401
	srVersionNotFound = 40402
)

// srRegistry implements Registry with srclient against a Confluent-API
// schema registry (Confluent Schema Registry, Apicurio's ccompat API,
// Redpanda, Karapace).
type srRegistry struct {
	base   string
	opts   SRClientOptions
	client srclient.ISchemaRegistryClient
	http   *http.Client

	mu  sync.Mutex
	ids map[[2]string]int // {subject, schema text} → id
	// pending holds levels set on subjects the registry did not know yet
	// (Apicurio refuses /config for them with 40401, unlike Confluent's
	// registry); Register applies them right after the first version.
	pending map[string]string
	// texts caches SchemaByID's answers: an id never changes its schema.
	texts map[int]string
}

// NewSRClient returns a Registry that talks to the Confluent REST API at url
// (e.g. "http://127.0.0.1:8081").
//
// Register posts to /subjects/{subject}/versions, which returns the existing
// id for a schema already registered under the subject, so it is idempotent;
// ids are cached per (subject, schema text), so repeated registrations cost
// no request. SetCompatibility puts /config/{subject}; a registry that
// refuses that for a subject without versions (Apicurio) gets it right
// after the subject's first registration, and on Apicurio NONE is set as an
// explicit subject rule through its own API (its /config NONE only drops
// the subject's rule, leaving a registry-wide one in force). Compatible posts to
// /compatibility/subjects/{subject}/versions/latest?verbose=true and returns
// the registry's messages as the reason; a subject (or version) that does
// not exist yet is compatible. The client has no context support: a call
// whose ctx ends returns ctx.Err() at once while the request finishes in
// the background, bounded by Timeout.
func NewSRClient(url string, opts SRClientOptions) Registry {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if opts.TLS != nil {
		tr.TLSClientConfig = opts.TLS
	}
	hc := &http.Client{Timeout: opts.Timeout, Transport: tr}
	url = strings.TrimRight(url, "/")
	c := srclient.NewSchemaRegistryClient(url, srclient.WithClient(hc))
	if opts.Username != "" && opts.Password != "" {
		c.SetCredentials(opts.Username, opts.Password)
	}
	return newSRRegistry(url, c, hc, opts)
}

func newSRRegistry(base string, c srclient.ISchemaRegistryClient, hc *http.Client, opts SRClientOptions) *srRegistry {
	return &srRegistry{base: base, opts: opts, client: c, http: hc, ids: map[[2]string]int{}, pending: map[string]string{},
		texts: map[int]string{}}
}

// call runs fn (a blocking srclient call) and returns early when ctx ends.
func call[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Register implements Registry.
func (r *srRegistry) Register(ctx context.Context, subject, schema string) (int, error) {
	k := [2]string{subject, schema}
	r.mu.Lock()
	id, ok := r.ids[k]
	r.mu.Unlock()
	if ok {
		return id, nil
	}
	s, err := call(ctx, func() (*srclient.Schema, error) {
		return r.client.CreateSchema(subject, schema, srclient.Avro)
	})
	if err != nil {
		if ctx.Err() != nil {
			return 0, err
		}
		// A client that refuses duplicates (srclient's mock) or a
		// registry in read-only mode still knows the schema: look it up.
		if l, lerr := call(ctx, func() (*srclient.Schema, error) {
			return r.client.LookupSchema(subject, schema, srclient.Avro)
		}); lerr == nil && l != nil {
			s, err = l, nil
		}
	}
	if err != nil {
		return 0, fmt.Errorf("schema registry %s: register subject %q: %w", r.base, subject, err)
	}
	r.mu.Lock()
	level, deferred := r.pending[subject]
	r.mu.Unlock()
	if deferred {
		// The id is not cached before the level is set, so a failure here
		// is retried whole (registration is idempotent).
		if err := r.changeLevel(ctx, subject, level); err != nil {
			return 0, err
		}
		r.mu.Lock()
		if r.pending[subject] == level {
			delete(r.pending, subject)
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.ids[k] = s.ID()
	r.mu.Unlock()
	return s.ID(), nil
}

// SetCompatibility implements Registry.
func (r *srRegistry) SetCompatibility(ctx context.Context, subject, level string) error {
	level = strings.ToUpper(level)
	switch level {
	case CompatNone, CompatBackward, CompatBackwardTransitive, CompatForward, CompatForwardTransitive, CompatFull, CompatFullTransitive:
	default:
		return fmt.Errorf("schema: unknown compatibility level %q", level)
	}
	err := r.changeLevel(ctx, subject, level)
	if errors.Is(err, errNoSubject) {
		// A subject without versions accepts any schema whatever its level:
		// the level is set once the first version exists (see Register).
		r.mu.Lock()
		r.pending[subject] = level
		r.mu.Unlock()
		return nil
	}
	if err == nil {
		r.mu.Lock()
		delete(r.pending, subject)
		r.mu.Unlock()
	}
	return err
}

// errNoSubject: the registry does not know the subject (no version yet).
var errNoSubject = errors.New("subject not found")

// changeLevel sets subject's level; errNoSubject when the registry refuses
// because the subject has no version yet.
func (r *srRegistry) changeLevel(ctx context.Context, subject, level string) error {
	var err error
	if root, ok := apicurioRoot(r.base); ok && level == CompatNone {
		err = r.apicurioNone(ctx, root, subject)
	} else {
		_, err = call(ctx, func() (*srclient.CompatibilityLevel, error) {
			return r.client.ChangeSubjectCompatibilityLevel(subject, srclient.CompatibilityLevel(level))
		})
		var se srclient.Error
		if errors.As(err, &se) && se.Code == srSubjectNotFound {
			err = fmt.Errorf("%w: %w", errNoSubject, err)
		}
	}
	if err != nil {
		return fmt.Errorf("schema registry %s: set compatibility of subject %q to %s: %w", r.base, subject, level, err)
	}
	return nil
}

// apicurioRoot returns the root of an Apicurio Registry whose
// Confluent-compatible API is at base (…/apis/ccompat/v6 or v7).
func apicurioRoot(base string) (string, bool) {
	i := strings.Index(base, "/apis/ccompat/")
	if i < 0 {
		return "", false
	}
	return base[:i], true
}

// apicurioNone sets subject's level to NONE through Apicurio's own API.
// Its Confluent-compatible API implements PUT /config/{subject} NONE by
// deleting the subject's rule, after which a registry-wide rule (BACKWARD,
// say) applies again and an incompatible version is still refused (and a
// second NONE fails with "No rule named 'COMPATIBILITY'"). An explicit
// subject rule with the value NONE is what lifts the check.
func (r *srRegistry) apicurioNone(ctx context.Context, root, subject string) error {
	rules := root + "/apis/registry/v2/groups/default/artifacts/" + url.PathEscape(subject) + "/rules"
	body := []byte(`{"type":"COMPATIBILITY","config":"NONE"}`)
	send := func(method, u string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Content-Type", "application/json")
		if r.opts.Username != "" && r.opts.Password != "" {
			req.SetBasicAuth(r.opts.Username, r.opts.Password)
		}
		resp, err := r.http.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		var e struct {
			Name    string `json:"name"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		if resp.StatusCode/100 == 2 {
			return resp.StatusCode, "", nil
		}
		return resp.StatusCode, e.Name, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, e.Message)
	}
	st, name, err := send(http.MethodPut, rules+"/COMPATIBILITY")
	if st == http.StatusNotFound && name == "RuleNotFoundException" {
		_, name, err = send(http.MethodPost, rules)
	}
	if name == "ArtifactNotFoundException" {
		return fmt.Errorf("%w: %w", errNoSubject, err)
	}
	return err
}

// compatResponse is the registry's answer to a verbose compatibility check.
type compatResponse struct {
	IsCompatible bool     `json:"is_compatible"`
	Messages     []string `json:"messages"`
}

// restError is a Confluent REST error body.
type restError struct {
	Code    int    `json:"error_code"`
	Message string `json:"message"`
}

// Compatible implements Registry.
func (r *srRegistry) Compatible(ctx context.Context, subject, schema string) (bool, string, error) {
	body, err := json.Marshal(map[string]string{"schema": schema})
	if err != nil {
		return false, "", err
	}
	u := r.base + "/compatibility/subjects/" + url.PathEscape(subject) + "/versions/latest?verbose=true"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return false, "", err
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	req.Header.Set("Accept", "application/vnd.schemaregistry.v1+json, application/json")
	if r.opts.Username != "" && r.opts.Password != "" {
		req.SetBasicAuth(r.opts.Username, r.opts.Password)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, "", ctx.Err()
		}
		return false, "", fmt.Errorf("schema registry %s: compatibility of subject %q: %w", r.base, subject, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return false, "", fmt.Errorf("schema registry %s: compatibility of subject %q: %w", r.base, subject, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		var e restError
		if json.Unmarshal(data, &e) == nil && (e.Code == srSubjectNotFound || e.Code == srVersionNotFound) {
			return true, "", nil // nothing registered yet: anything goes
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return false, "", fmt.Errorf("schema registry %s: compatibility of subject %q: %s: %s",
			r.base, subject, resp.Status, strings.TrimSpace(string(data)))
	}
	var cr compatResponse
	if err := json.Unmarshal(data, &cr); err != nil {
		return false, "", fmt.Errorf("schema registry %s: compatibility of subject %q: bad response: %w", r.base, subject, err)
	}
	if cr.IsCompatible {
		return true, "", nil
	}
	reason := strings.Join(cr.Messages, "; ")
	if reason == "" {
		reason = "the registry reports the schema incompatible (no details given)"
	}
	return false, reason, nil
}

// SchemaByID returns the Avro schema text registered under id (GET
// /schemas/ids/{id}), for readers of the Confluent wire format. Answers
// are cached. It blocks until the registry answers and honours ctx.
func (r *srRegistry) SchemaByID(ctx context.Context, id int) (string, error) {
	r.mu.Lock()
	text, ok := r.texts[id]
	r.mu.Unlock()
	if ok {
		return text, nil
	}
	fail := func(err error) error { return fmt.Errorf("schema registry %s: schema id %d: %w", r.base, id, err) }
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/schemas/ids/%d", r.base, id), nil)
	if err != nil {
		return "", fail(err)
	}
	req.Header.Set("Accept", "application/vnd.schemaregistry.v1+json, application/json")
	if r.opts.Username != "" && r.opts.Password != "" {
		req.SetBasicAuth(r.opts.Username, r.opts.Password)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fail(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", fail(err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fail(fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body))))
	}
	var answer struct {
		Schema     string `json:"schema"`
		SchemaType string `json:"schemaType"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return "", fail(err)
	}
	if answer.SchemaType != "" && !strings.EqualFold(answer.SchemaType, "AVRO") {
		return "", fail(fmt.Errorf("a %s schema, not Avro", answer.SchemaType))
	}
	r.mu.Lock()
	r.texts[id] = answer.Schema
	r.mu.Unlock()
	return answer.Schema, nil
}

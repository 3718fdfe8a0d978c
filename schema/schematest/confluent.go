// Package schematest provides a test double of a Confluent-API schema
// registry: an httptest server speaking the few REST endpoints sluice uses,
// backed by schema.MemRegistry (so its compatibility answers are real Avro
// schema-resolution checks).
package schematest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/schema"
)

// Registry is the running double. Endpoints:
//
//	POST /subjects/{s}/versions                        register → {"id"}; 409 when incompatible
//	POST /subjects/{s}                                 look up → {"subject","id","version","schema"}
//	GET  /subjects/{s}/versions                        [1, 2, …]
//	GET  /schemas/ids/{id}                             {"schema"}
//	PUT  /config/{s}                                   {"compatibility"}
//	POST /compatibility/subjects/{s}/versions/latest   {"is_compatible","messages"}; 404/40401 without versions
//
// Errors use the Confluent body {"error_code", "message"}.
type Registry struct {
	*httptest.Server
	Mem *schema.MemRegistry
	// Username and Password, when set, are required as basic auth.
	Username, Password string

	mu       sync.Mutex
	requests map[string]int // "METHOD /first-path-segment…" → count
	levels   map[string]string
}

// New starts a double; it is closed at test cleanup.
func New(t testing.TB) *Registry {
	r := &Registry{Mem: schema.NewMemRegistry(), requests: map[string]int{}, levels: map[string]string{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Server.Close)
	return r
}

// NewTLS starts a double on HTTPS (its certificate is r.Certificate(), its
// client r.Client()).
func NewTLS(t testing.TB) *Registry {
	r := &Registry{Mem: schema.NewMemRegistry(), requests: map[string]int{}, levels: map[string]string{}}
	r.Server = httptest.NewTLSServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Server.Close)
	return r
}

// Requests returns how many requests matched key, e.g.
// "POST /subjects/{s}/versions" or "PUT /config/{s}".
func (r *Registry) Requests(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[key]
}

// Level returns the compatibility level last set for subject ("" if none).
func (r *Registry) Level(subject string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.levels[subject]
}

func (r *Registry) count(key string) {
	r.mu.Lock()
	r.requests[key]++
	r.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{"error_code": code, "message": msg})
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	if r.Username != "" {
		u, p, ok := req.BasicAuth()
		if !ok || u != r.Username || p != r.Password {
			fail(w, http.StatusUnauthorized, 401, "Unauthorized")
			return
		}
	}
	var parts []string
	for _, p := range strings.Split(strings.Trim(req.URL.EscapedPath(), "/"), "/") {
		s, err := url.PathUnescape(p)
		if err != nil {
			fail(w, http.StatusBadRequest, 400, "bad path")
			return
		}
		parts = append(parts, s)
	}
	var body struct {
		Schema        string `json:"schema"`
		Compatibility string `json:"compatibility"`
	}
	if req.Method == http.MethodPost || req.Method == http.MethodPut {
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			fail(w, http.StatusUnprocessableEntity, 42201, "invalid request body: "+err.Error())
			return
		}
	}
	ctx := req.Context()
	route := func(method string, pattern ...string) bool {
		if req.Method != method || len(parts) != len(pattern) {
			return false
		}
		for i, p := range pattern {
			if p != "{}" && p != parts[i] {
				return false
			}
		}
		return true
	}
	switch {
	case route("POST", "subjects", "{}", "versions"):
		r.count("POST /subjects/{s}/versions")
		subject := parts[1]
		if _, err := schema.ParseSchemaText(body.Schema); err != nil {
			fail(w, http.StatusUnprocessableEntity, 42201, "Invalid schema: "+err.Error())
			return
		}
		ok, reason, err := r.Mem.Compatible(ctx, subject, body.Schema)
		if err != nil {
			fail(w, http.StatusInternalServerError, 50001, err.Error())
			return
		}
		if !ok && !r.known(subject, body.Schema) {
			fail(w, http.StatusConflict, 409, "Schema being registered is incompatible with an earlier schema for subject \""+subject+"\", details: "+reason)
			return
		}
		id, err := r.Mem.Register(ctx, subject, body.Schema)
		if err != nil {
			fail(w, http.StatusInternalServerError, 50001, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"id": id})
	case route("POST", "subjects", "{}"):
		r.count("POST /subjects/{s}")
		subject := parts[1]
		for v, id := range r.Mem.Versions(subject) {
			if text, _ := r.Mem.Schema(id); text == body.Schema {
				writeJSON(w, http.StatusOK, map[string]any{"subject": subject, "id": id, "version": v + 1, "schema": text})
				return
			}
		}
		if len(r.Mem.Versions(subject)) == 0 {
			fail(w, http.StatusNotFound, 40401, "Subject '"+subject+"' not found.")
			return
		}
		fail(w, http.StatusNotFound, 40403, "Schema not found")
	case route("GET", "subjects", "{}", "versions"):
		r.count("GET /subjects/{s}/versions")
		ids := r.Mem.Versions(parts[1])
		if len(ids) == 0 {
			fail(w, http.StatusNotFound, 40401, "Subject '"+parts[1]+"' not found.")
			return
		}
		vs := make([]int, len(ids))
		for i := range ids {
			vs[i] = i + 1
		}
		writeJSON(w, http.StatusOK, vs)
	case route("GET", "schemas", "ids", "{}"):
		r.count("GET /schemas/ids/{id}")
		id, _ := strconv.Atoi(parts[2])
		text, ok := r.Mem.Schema(id)
		if !ok {
			fail(w, http.StatusNotFound, 40403, fmt.Sprintf("Schema %d not found", id))
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"schema": text})
	case route("PUT", "config", "{}"):
		r.count("PUT /config/{s}")
		level := strings.ToUpper(body.Compatibility)
		if err := r.Mem.SetCompatibility(ctx, parts[1], level); err != nil {
			fail(w, http.StatusUnprocessableEntity, 42203, "Invalid compatibility level")
			return
		}
		r.mu.Lock()
		r.levels[parts[1]] = level
		r.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"compatibility": level})
	case route("POST", "compatibility", "subjects", "{}", "versions", "latest"):
		r.count("POST /compatibility/subjects/{s}/versions/latest")
		subject := parts[2]
		if len(r.Mem.Versions(subject)) == 0 {
			fail(w, http.StatusNotFound, 40401, "Subject '"+subject+"' not found.")
			return
		}
		ok, reason, err := r.Mem.Compatible(ctx, subject, body.Schema)
		if err != nil {
			fail(w, http.StatusUnprocessableEntity, 42201, "Invalid schema: "+err.Error())
			return
		}
		resp := map[string]any{"is_compatible": ok}
		if !ok && req.URL.Query().Get("verbose") == "true" {
			resp["messages"] = []string{reason}
		}
		writeJSON(w, http.StatusOK, resp)
	default:
		r.count("unknown")
		fail(w, http.StatusNotFound, 404, "HTTP 404 Not Found: "+req.Method+" "+req.URL.Path)
	}
}

// known reports whether schema is already a version of subject (which a
// registry accepts again whatever the level).
func (r *Registry) known(subject, text string) bool {
	for _, id := range r.Mem.Versions(subject) {
		if s, _ := r.Mem.Schema(id); s == text {
			return true
		}
	}
	return false
}

package search

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Engine kinds.
const (
	KindOpenSearch    = "opensearch"
	KindElasticsearch = "elasticsearch"
)

// Options configures a Sink. Every field maps to one config key; see the
// package documentation for defaults and meaning.
type Options struct {
	// Name identifies the sink in logs.
	Name string
	// Kind is "opensearch" or "elasticsearch" (required): it picks the
	// official client of that engine.
	Kind string
	// URLs are the nodes' HTTP endpoints, e.g. https://search-1:9200
	// (at least one).
	URLs []string
	// Username and Password authenticate with HTTP basic authentication.
	Username string
	Password string
	// APIKey (Elasticsearch only) is the base64 "id:api_key" token; it
	// takes precedence over Username and Password.
	APIKey string
	// CAFile is a PEM file of the certificate authorities to trust for
	// https URLs (default: the system's).
	CAFile string
	// InsecureSkipVerify disables TLS certificate verification (tests only).
	InsecureSkipVerify bool
	// IndexTemplate names a table's index; placeholders {database},
	// {schema} and {table}. The result is lower-cased and characters an
	// index name may not hold become '_'. Default "{schema}.{table}".
	IndexTemplate string
	// Mappings overrides the derived mapping per table, keyed by
	// "schema.table": a JSON object like the "mappings" of a create-index
	// request. Its "properties" replace the derived ones field by field;
	// its other members (dynamic, _source, …) are added. Used when the
	// sink creates the index or adds a column.
	Mappings map[string]json.RawMessage
	// AliasSuffix names the filtered alias created with each index that
	// shows only live documents (default "-live": "shop.orders-live").
	AliasSuffix string
	// StateIndex holds the sink's per-index state: truncate barriers and
	// snapshot activity (default "sluice_state").
	StateIndex string
	// Refresh makes every bulk request refresh the touched shards before
	// it returns, so that searches see the writes at once (tests). A
	// refresh is not durability: Write is durable without it.
	Refresh bool
	// TombstoneTTL is how long a delete's tombstone document is kept once
	// the table's snapshot is over (default 168h; negative: forever). It
	// must exceed the longest replay horizon: a record older than a purged
	// tombstone could bring its document back.
	TombstoneTTL time.Duration
	// BulkMaxBytes caps the body of one bulk request (default 8 MiB); a
	// larger batch is sent as several requests.
	BulkMaxBytes int
	// Timeout bounds each request to the engine (default 60s).
	Timeout time.Duration
}

const (
	defaultTemplate     = "{schema}.{table}"
	defaultAliasSuffix  = "-live"
	defaultStateIndex   = "sluice_state"
	defaultTombstoneTTL = 168 * time.Hour
	defaultBulkMaxBytes = 8 << 20
	minBulkMaxBytes     = 64 << 10
	defaultTimeout      = 60 * time.Second
)

func (o *Options) setDefaults() {
	if o.Name == "" {
		o.Name = "search"
	}
	o.Kind = strings.ToLower(strings.TrimSpace(o.Kind))
	if o.IndexTemplate == "" {
		o.IndexTemplate = defaultTemplate
	}
	if o.AliasSuffix == "" {
		o.AliasSuffix = defaultAliasSuffix
	}
	if o.StateIndex == "" {
		o.StateIndex = defaultStateIndex
	}
	if o.TombstoneTTL == 0 {
		o.TombstoneTTL = defaultTombstoneTTL
	}
	if o.BulkMaxBytes <= 0 {
		o.BulkMaxBytes = defaultBulkMaxBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
}

// validate checks the options and parses the mapping overrides.
func (o *Options) validate() (map[string]*override, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.Kind != KindOpenSearch && o.Kind != KindElasticsearch {
		bad("kind %q: want %q or %q", o.Kind, KindOpenSearch, KindElasticsearch)
	}
	if len(o.URLs) == 0 {
		bad("urls: at least one node URL is required")
	}
	for _, u := range o.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("url %q: want http(s)://host:port", u)
		}
	}
	if o.APIKey != "" && o.Kind == KindOpenSearch {
		bad("api_key: OpenSearch has no API keys; use username and password")
	}
	if o.CAFile != "" {
		if _, err := os.Stat(o.CAFile); err != nil {
			bad("ca_file: %v", err)
		}
	}
	if o.BulkMaxBytes < minBulkMaxBytes {
		bad("bulk_max_bytes %d: at least %d", o.BulkMaxBytes, minBulkMaxBytes)
	}
	if err := pipeline.CheckNameTemplate(o.IndexTemplate); err != nil {
		bad("index_template %q: %v", o.IndexTemplate, err)
	}
	if _, err := sanitizeIndex(o.StateIndex); err != nil || strings.ToLower(o.StateIndex) != o.StateIndex {
		bad("state_index %q: not a valid lower-case index name", o.StateIndex)
	}
	if s, _ := sanitizeIndex("x" + o.AliasSuffix); s != "x"+o.AliasSuffix {
		bad("alias_suffix %q: may only hold lower-case characters allowed in index names", o.AliasSuffix)
	}
	overrides := map[string]*override{}
	for table, raw := range o.Mappings {
		ov, err := parseOverride(raw)
		if err != nil {
			bad("mappings[%s]: %v", table, err)
			continue
		}
		overrides[table] = ov
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("search sink %s: %w", o.Name, errors.Join(errs...))
	}
	return overrides, nil
}

// override is a parsed per-table mapping override.
type override struct {
	props map[string]json.RawMessage
	other map[string]json.RawMessage
}

func parseOverride(raw json.RawMessage) (*override, error) {
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil || top == nil {
		return nil, fmt.Errorf("want a JSON object like a create-index request's \"mappings\": %v", err)
	}
	ov := &override{props: map[string]json.RawMessage{}, other: map[string]json.RawMessage{}}
	for k, v := range top {
		if k != "properties" {
			ov.other[k] = v
			continue
		}
		if err := json.Unmarshal(v, &ov.props); err != nil {
			return nil, fmt.Errorf("properties: want an object of field mappings: %v", err)
		}
	}
	for k := range ov.props {
		if strings.HasPrefix(k, metaPrefix) {
			return nil, fmt.Errorf("properties: field %s is the sink's own", k)
		}
	}
	return ov, nil
}

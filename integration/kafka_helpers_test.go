package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// Helpers of the Postgres → Kafka end-to-end tests: the three services
// started side by side, a plain HTTP client of the registry's
// Confluent-compatible API (what a consumer uses to find writer schemas by
// id), a topic reader, and a consumer that folds change events into the
// final state of each key the way a downstream upsert consumer does.
//
// kcat cannot stand in for the consumer: Debian's build has no Avro
// support, so the independent check decodes with Python's fastavro.

// kafkaStack starts PostgreSQL and returns it with the package's shared
// Kafka broker and schema registry (see sharedKafka).
func kafkaStack(t *testing.T) (*harness.Postgres, *harness.Kafka, *harness.Registry) {
	t.Helper()
	return withKafka(t, func(ctx context.Context) (*harness.Postgres, error) {
		return harness.StartPostgres(ctx, harness.PostgresOptions{})
	})
}

// withKafka starts a database with start and returns it (stopped at
// cleanup) with the package's shared broker and registry, started beside
// it on first use. A missing service skips the test, except in CI where
// it fails it.
func withKafka[DB interface{ Stop() error }](t *testing.T, start func(context.Context) (DB, error)) (DB, *harness.Kafka, *harness.Registry) {
	t.Helper()
	harness.SkipShort(t, "starts a database, a Kafka broker and a schema registry")
	var (
		wg  sync.WaitGroup
		db  DB
		err error
	)
	wg.Add(1)
	go func() { defer wg.Done(); db, err = start(context.Background()) }()
	k, reg, kerr := sharedKafka()
	wg.Wait()
	if err == nil {
		t.Cleanup(func() { _ = db.Stop() })
	}
	if err := errors.Join(err, kerr); err != nil {
		harness.SkipOrFail(t, err)
	}
	return db, k, reg
}

// A Kafka broker and a registry take tens of seconds to start: the tests
// that only produce to them share one pair for the whole package, each
// with its own pipeline name and so its own topics, subjects and
// offsets-topic keys. A test that stops or restarts the broker starts its
// own (privateKafka).
var sharedK struct {
	once sync.Once
	k    *harness.Kafka
	reg  *harness.Registry
	err  error
}

// sharedKafka returns the package's broker and registry (global
// compatibility BACKWARD), starting them on first use; TestMain stops them.
func sharedKafka() (*harness.Kafka, *harness.Registry, error) {
	sharedK.once.Do(func() {
		sharedK.k, sharedK.reg, sharedK.err = startKafkaPair()
	})
	return sharedK.k, sharedK.reg, sharedK.err
}

// privateKafka starts a broker and a registry of the test's own, stopped
// at cleanup.
func privateKafka(t *testing.T) (*harness.Kafka, *harness.Registry) {
	t.Helper()
	harness.SkipShort(t, "starts a Kafka broker and a schema registry")
	k, reg, err := startKafkaPair()
	if k != nil {
		t.Cleanup(func() { _ = k.Stop() })
	}
	if reg != nil {
		t.Cleanup(func() { _ = reg.Stop() })
	}
	if err != nil {
		harness.SkipOrFail(t, err)
	}
	return k, reg
}

// startKafkaPair starts a broker and a registry side by side.
func startKafkaPair() (*harness.Kafka, *harness.Registry, error) {
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		k    *harness.Kafka
		reg  *harness.Registry
		errs [2]error
	)
	wg.Add(2)
	// Proxied: the outage test reaches the broker through its proxy.
	go func() { defer wg.Done(); k, errs[0] = harness.StartKafka(ctx, harness.KafkaOptions{Proxied: true}) }()
	go func() {
		defer wg.Done()
		reg, errs[1] = harness.StartRegistry(ctx, harness.RegistryOptions{GlobalCompatibility: "BACKWARD"})
	}()
	wg.Wait()
	return k, reg, errors.Join(errs[:]...)
}

// proxiedKafka returns the shared pair for a test that cuts, slows or
// throttles the broker's proxy (its proxied listener); the proxy is back
// to normal at cleanup. One such test at a time.
func proxiedKafka(t *testing.T) (*harness.Kafka, *harness.Registry) {
	t.Helper()
	harness.SkipShort(t, "starts a Kafka broker and a schema registry")
	k, reg, err := sharedKafka()
	if err != nil {
		harness.SkipOrFail(t, err)
	}
	t.Cleanup(func() {
		k.Proxy.SetLatency(0)
		k.Proxy.SetBandwidth(0)
		k.Proxy.Restore()
	})
	return k, reg
}

// stopSharedKafka stops the shared pair, if it was started.
func stopSharedKafka() {
	if sharedK.k != nil {
		_ = sharedK.k.Stop()
	}
	if sharedK.reg != nil {
		_ = sharedK.reg.Stop()
	}
}

// writeConfig writes a pipeline config into dir and returns its path.
func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// registryHTTP is a consumer's view of the registry: its REST API only.
type registryHTTP struct {
	base  string
	mu    sync.Mutex
	texts map[int]string
}

func newRegistryHTTP(r *harness.Registry) *registryHTTP {
	return &registryHTTP{base: r.URL(), texts: map[int]string{}}
}

// get fetches path and decodes the JSON answer into out; it returns the
// status (answers other than 2xx are not decoded).
func (r *registryHTTP) get(t *testing.T, path string, out any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.schemaregistry.v1+json, application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode/100 == 2 && out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("GET %s: %s: decode %q: %v", path, resp.Status, raw, err)
		}
	}
	return resp.StatusCode
}

// schemaByID is GET /schemas/ids/{id}: the writer schema of a framed
// message, as a consumer looks it up.
func (r *registryHTTP) schemaByID(t *testing.T, id int) string {
	t.Helper()
	r.mu.Lock()
	text, ok := r.texts[id]
	r.mu.Unlock()
	if ok {
		return text
	}
	var body struct {
		Schema string `json:"schema"`
	}
	if st := r.get(t, fmt.Sprintf("/schemas/ids/%d", id), &body); st != http.StatusOK || body.Schema == "" {
		t.Fatalf("GET /schemas/ids/%d: status %d", id, st)
	}
	r.mu.Lock()
	r.texts[id] = body.Schema
	r.mu.Unlock()
	return body.Schema
}

// versions is GET /subjects/{subject}/versions (nil for an unknown subject).
func (r *registryHTTP) versions(t *testing.T, subject string) []int {
	t.Helper()
	var vs []int
	switch st := r.get(t, "/subjects/"+url.PathEscape(subject)+"/versions", &vs); st {
	case http.StatusOK:
		return vs
	case http.StatusNotFound:
		return nil
	default:
		t.Fatalf("GET /subjects/%s/versions: status %d", subject, st)
	}
	return nil
}

// versionID is the schema id of version v of subject.
func (r *registryHTTP) versionID(t *testing.T, subject string, v int) int {
	t.Helper()
	var body struct {
		ID int `json:"id"`
	}
	if st := r.get(t, fmt.Sprintf("/subjects/%s/versions/%d", url.PathEscape(subject), v), &body); st != http.StatusOK {
		t.Fatalf("GET /subjects/%s/versions/%d: status %d", subject, v, st)
	}
	return body.ID
}

// subjects is GET /subjects, sorted.
func (r *registryHTTP) subjects(t *testing.T) []string {
	t.Helper()
	var s []string
	if st := r.get(t, "/subjects", &s); st != http.StatusOK {
		t.Fatalf("GET /subjects: status %d", st)
	}
	sort.Strings(s)
	return s
}

// readTopic returns every record of topic up to its end offsets at the
// time of the call, in partition then offset order.
func readTopic(t *testing.T, k *harness.Kafka, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want := endOffsets(t, k, topic)
	total := int64(0)
	for _, n := range want {
		total += n
	}
	if total == 0 {
		return nil
	}
	cl, err := k.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	byPart := map[int32][]*kgo.Record{}
	got := int64(0)
	for got < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("topic %s: read %d of %d records", topic, got, total)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < want[r.Partition] {
				byPart[r.Partition] = append(byPart[r.Partition], r)
				got++
			}
		})
	}
	parts := make([]int32, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var out []*kgo.Record
	for _, p := range parts {
		out = append(out, byPart[p]...)
	}
	return out
}

// endOffsets returns the end offset of every partition of topic (none for
// a topic that does not exist).
func endOffsets(t *testing.T, k *harness.Kafka, topic string) map[int32]int64 {
	t.Helper()
	cl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return
		}
		if o.Err != nil {
			t.Fatalf("end offset %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out
}

func recHeader(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// sameSchemaJSON reports whether two schema texts are the same JSON (a
// registry may reformat what it was given).
func sameSchemaJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// avroDecoder decodes a topic's framed keys and values with the writer
// schemas it fetches from the registry by id. Each id is matched to one of
// the candidate table shapes (the table as PostgreSQL described it at
// some point) whose key or envelope schema has the same Avro structure
// (parsing canonical form); the payload is then decoded twice: generically
// with the registry's own schema text, and into pipeline values by the
// matched shape's codec.
type avroDecoder struct {
	reg        *registryHTTP
	candidates []*schema.Codec
	byID       map[int]*schema.Codec
	// exact[id]: the registry's text is the matched shape's text (as
	// JSON), not only the same structure.
	exact map[int]bool
	texts map[int]avro.Schema // the registry's schemas, parsed
}

func newAvroDecoder(t *testing.T, reg *registryHTTP, serverName string, shapes ...*pipeline.Table) *avroDecoder {
	t.Helper()
	d := &avroDecoder{reg: reg, byID: map[int]*schema.Codec{}, exact: map[int]bool{}, texts: map[int]avro.Schema{}}
	for _, s := range shapes {
		d.addShape(t, serverName, s)
	}
	return d
}

func (d *avroDecoder) addShape(t *testing.T, serverName string, s *pipeline.Table) {
	t.Helper()
	c, err := schema.NewCodec(s, schema.Options{ConnectorName: "postgresql", ServerName: serverName, Unchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	d.candidates = append(d.candidates, c)
}

// codec returns the codec for schema id (a key schema when key).
func (d *avroDecoder) codec(t *testing.T, id int, key bool) *schema.Codec {
	t.Helper()
	if c, ok := d.byID[id]; ok {
		return c
	}
	text := d.reg.schemaByID(t, id)
	parsed, err := schema.ParseSchemaText(text)
	if err != nil {
		t.Fatalf("schema id %d from the registry does not parse: %v\n%s", id, err, text)
	}
	d.texts[id] = parsed
	var found *schema.Codec
	for _, c := range d.candidates {
		s := c.EnvelopeSchema()
		if key {
			s = c.KeySchema()
		}
		if s == nil {
			continue
		}
		own, _ := schema.SchemaText(s)
		if sameSchemaJSON(own, text) {
			found, d.exact[id] = c, true
			break
		}
		if found == nil && s.String() == parsed.String() {
			found = c
		}
	}
	if found == nil {
		t.Fatalf("schema id %d from the registry matches none of the %d known table shapes:\n%s", id, len(d.candidates), text)
	}
	d.byID[id] = found
	return found
}

// decodedEvent is one record of a table topic, decoded.
type decodedEvent struct {
	rec      *kgo.Record
	key      string // sinktest.Key of the decoded key
	version  pipeline.Version
	valueID  int
	env      *schema.Envelope // nil for a tombstone
	rawAfter map[string]any   // generic decode with the registry schema
	texts    int              // values read from sluice.text.after.* headers
}

// decode decodes every record of a table topic (keys required: no
// truncate events in these tests).
func (d *avroDecoder) decode(t *testing.T, recs []*kgo.Record) []decodedEvent {
	t.Helper()
	out := make([]decodedEvent, 0, len(recs))
	for _, m := range recs {
		vs, ok := recHeader(m, "sluice.version")
		if !ok {
			t.Fatalf("%s/%d@%d: no sluice.version header", m.Topic, m.Partition, m.Offset)
		}
		v, err := pipeline.ParseVersion(vs)
		if err != nil {
			t.Fatal(err)
		}
		op, _ := recHeader(m, "sluice.op")
		ev := decodedEvent{rec: m, version: v}
		kid, kp, err := schema.Unframe(m.Key)
		if err != nil {
			t.Fatalf("%s/%d@%d: key: %v", m.Topic, m.Partition, m.Offset, err)
		}
		key, err := d.codec(t, kid, true).DecodeKey(kp)
		if err != nil {
			t.Fatalf("%s/%d@%d: key: %v", m.Topic, m.Partition, m.Offset, err)
		}
		ev.key = sinktest.Key(key)
		if m.Value != nil {
			id, payload, err := schema.Unframe(m.Value)
			if err != nil {
				t.Fatalf("%s/%d@%d: value: %v", m.Topic, m.Partition, m.Offset, err)
			}
			c := d.codec(t, id, false)
			ev.valueID = id
			// The registry's text alone decodes the payload (a generic
			// consumer), and so does the shape's codec.
			var generic map[string]any
			if err := c.API().Unmarshal(d.texts[id], payload, &generic); err != nil {
				t.Fatalf("%s/%d@%d: decode with the registry's schema %d: %v", m.Topic, m.Partition, m.Offset, id, err)
			}
			if generic["op"] != op {
				t.Fatalf("%s/%d@%d: op %v, header %q", m.Topic, m.Partition, m.Offset, generic["op"], op)
			}
			if a, ok := generic["after"].(map[string]any); ok {
				ev.rawAfter = a
			}
			if ev.env, err = c.DecodeEnvelope(payload); err != nil {
				t.Fatalf("%s/%d@%d: %v", m.Topic, m.Partition, m.Offset, err)
			}
			// A value Avro cannot hold travels as text in a header, its
			// field null (README: Avro type mapping).
			for _, h := range m.Headers {
				name, ok := strings.CutPrefix(h.Key, "sluice.text.after.")
				if !ok || ev.env.After == nil {
					continue
				}
				for i, col := range c.Table().Columns {
					if col.Name != name {
						continue
					}
					if ev.env.After[i] != nil {
						t.Fatalf("%s/%d@%d: header %s for a field that is not null", m.Topic, m.Partition, m.Offset, h.Key)
					}
					if ev.env.After[i], err = textform.Decode(&col, string(h.Value)); err != nil {
						t.Fatalf("%s/%d@%d: header %s: %v", m.Topic, m.Partition, m.Offset, h.Key, err)
					}
					ev.texts++
				}
			}
		} else if op != "d" {
			t.Fatalf("%s/%d@%d: tombstone with op header %q", m.Topic, m.Partition, m.Offset, op)
		}
		out = append(out, ev)
	}
	return out
}

// foldedRow is what an upsert consumer holds for a key.
type foldedRow struct {
	row     []any
	version pipeline.Version
	deleted bool
}

// fold applies decoded events as an upsert consumer does: per key the
// newest version wins (older and equal ones are replays), a delete event or
// tombstone removes the row, unchanged TOAST values keep the value held.
// Rows come back aligned with the columns of the shape they were written
// with.
func fold(events []decodedEvent) map[string][]any {
	state := map[string]*foldedRow{}
	for _, ev := range events {
		old := state[ev.key]
		if old != nil && !old.version.Less(ev.version) {
			continue
		}
		if ev.env == nil || ev.env.Op == "d" {
			state[ev.key] = &foldedRow{version: ev.version, deleted: true}
			continue
		}
		row := append([]any(nil), ev.env.After...)
		for i, x := range row {
			if _, unchanged := x.(pipeline.Unchanged); unchanged {
				row[i] = nil
				if old != nil && !old.deleted && i < len(old.row) {
					row[i] = old.row[i]
				}
			}
		}
		state[ev.key] = &foldedRow{row: row, version: ev.version}
	}
	out := map[string][]any{}
	for k, r := range state {
		if !r.deleted {
			out[k] = r.row
		}
	}
	return out
}

// checkKeyOrder checks, per key in offset order, that no change arrives
// after a newer one of the same key: every version seen for the first time
// is greater than every version seen before it. A version seen again is a
// replay (at-least-once: a batch retried after a produce error re-sends
// what may already have landed) and is allowed. It returns how many keys
// had such replays that went back in version.
func checkKeyOrder(t *testing.T, events []decodedEvent) (regressions int) {
	t.Helper()
	type keyState struct {
		max  pipeline.Version
		seen map[pipeline.Version]bool
		back bool
	}
	per := map[string]*keyState{}
	for _, ev := range events {
		s := per[ev.key]
		if s == nil {
			s = &keyState{seen: map[pipeline.Version]bool{}}
			per[ev.key] = s
		}
		switch {
		case s.max.Less(ev.version) || len(s.seen) == 0:
			s.max = ev.version
		case s.seen[ev.version]:
			if ev.version.Less(s.max) {
				s.back = true
			}
		default:
			t.Errorf("key %s: version %s first arrives at %s/%d@%d after the newer %s (reordered)",
				ev.key, ev.version, ev.rec.Topic, ev.rec.Partition, ev.rec.Offset, s.max)
		}
		s.seen[ev.version] = true
	}
	for _, s := range per {
		if s.back {
			regressions++
		}
	}
	return regressions
}

// slotConfirmed returns the slot's confirmed_flush_lsn as text.
func slotConfirmed(t *testing.T, ctx context.Context, conn *pgx.Conn, slot string) string {
	t.Helper()
	var lsn *string
	if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	if lsn == nil {
		return "0/0"
	}
	return *lsn
}

// lsnLE reports a ≤ b for pg_lsn texts, as the server compares them.
func lsnLE(t *testing.T, ctx context.Context, conn *pgx.Conn, a, b string) bool {
	t.Helper()
	var le bool
	if err := conn.QueryRow(ctx, `SELECT $1::pg_lsn <= $2::pg_lsn`, a, b).Scan(&le); err != nil {
		t.Fatal(err)
	}
	return le
}

// diffState compares the folded Kafka state with PostgreSQL's rows.
func diffState(t *testing.T, table *pipeline.Table, want, got map[string][]any, what string) {
	t.Helper()
	if diff := sinktest.Diff(table, want, got); diff != "" {
		t.Fatalf("%s: Kafka (folded by key and version) differs from PostgreSQL:\n%s", what, diff)
	}
}

// waitExit waits for the daemon to exit within timeout and returns its code.
func (d *daemonProc) waitExit(timeout time.Duration) (int, bool) {
	select {
	case <-d.done:
		return d.exitCode(), true
	case <-time.After(timeout):
		return -1, false
	}
}

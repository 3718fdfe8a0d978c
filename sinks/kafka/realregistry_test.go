package kafka

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
)

// The every-type and evolution checks of TestKafkaSink against a real
// Confluent-compatible registry (Apicurio, started by the harness, with a
// registry-wide BACKWARD rule as Confluent's default) instead of the
// schematest double: the sink reaches it through schema.NewSRClient, and
// the test inspects it only through its REST API, as an operator or a
// consumer would.
func TestKafkaSinkRealRegistry(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker and a schema registry")
	var (
		wg   sync.WaitGroup
		k    *harness.Kafka
		r    *harness.Registry
		errs [2]error
	)
	wg.Add(2)
	go func() { defer wg.Done(); k, errs[0] = harness.StartKafka(context.Background(), harness.KafkaOptions{}) }()
	go func() {
		defer wg.Done()
		r, errs[1] = harness.StartRegistry(context.Background(), harness.RegistryOptions{GlobalCompatibility: schema.CompatBackward})
	}()
	wg.Wait()
	if k != nil {
		t.Cleanup(func() { _ = k.Stop() })
	}
	if r != nil {
		t.Cleanup(func() { _ = r.Stop() })
	}
	if err := errors.Join(errs[:]...); err != nil {
		harness.SkipOrFail(t, err)
	}
	view := &restRegistry{base: r.URL()}
	reg := schema.NewSRClient(r.URL(), schema.SRClientOptions{Timeout: 10 * time.Second})
	t.Run("EveryType", func(t *testing.T) { testEveryType(t, k, reg, view) })
	t.Run("Evolution", func(t *testing.T) { testEvolutionRealRegistry(t, k, reg, view) })
}

// restRegistry inspects a registry through the Confluent REST API.
type restRegistry struct{ base string }

func (r *restRegistry) get(t *testing.T, path string, out any) int {
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

// schema is GET /schemas/ids/{id}.
func (r *restRegistry) schema(t *testing.T, id int) string {
	t.Helper()
	var body struct {
		Schema string `json:"schema"`
	}
	if st := r.get(t, fmt.Sprintf("/schemas/ids/%d", id), &body); st != http.StatusOK {
		t.Fatalf("GET /schemas/ids/%d: status %d", id, st)
	}
	return body.Schema
}

// versionIDs returns the schema ids of subject's versions, oldest first.
func (r *restRegistry) versionIDs(t *testing.T, subject string) []int {
	t.Helper()
	var vs []int
	switch st := r.get(t, "/subjects/"+url.PathEscape(subject)+"/versions", &vs); st {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil
	default:
		t.Fatalf("GET /subjects/%s/versions: status %d", subject, st)
	}
	sort.Ints(vs)
	ids := make([]int, len(vs))
	for i, v := range vs {
		var body struct {
			ID int `json:"id"`
		}
		if st := r.get(t, fmt.Sprintf("/subjects/%s/versions/%d", url.PathEscape(subject), v), &body); st != http.StatusOK {
			t.Fatalf("GET /subjects/%s/versions/%d: status %d", subject, v, st)
		}
		ids[i] = body.ID
	}
	return ids
}

// subjects returns the subjects starting with prefix, sorted.
func (r *restRegistry) subjects(t *testing.T, prefix string) []string {
	t.Helper()
	var all []string
	if st := r.get(t, "/subjects", &all); st != http.StatusOK {
		t.Fatalf("GET /subjects: status %d", st)
	}
	var out []string
	for _, s := range all {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// level is GET /config/{subject}.
func (r *restRegistry) level(t *testing.T, subject string) string {
	t.Helper()
	var body map[string]string
	if st := r.get(t, "/config/"+url.PathEscape(subject), &body); st != http.StatusOK {
		t.Fatalf("GET /config/%s: status %d", subject, st)
	}
	return body["compatibilityLevel"] + body["compatibility"]
}

// same compares schema texts as JSON (a registry may reformat them).
func (r *restRegistry) same(a, b string) bool { return sameText(a, b) }

// client is a fresh registry client, as a restarted process has.
func (r *restRegistry) client() schema.Registry {
	return schema.NewSRClient(r.base, schema.SRClientOptions{Timeout: 10 * time.Second})
}

// sameText compares schema texts as JSON (a registry may reformat them).
func sameText(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// testEvolution with a real registry deciding compatibility.
func testEvolutionRealRegistry(t *testing.T, k *harness.Kafka, reg schema.Registry, view *restRegistry) {
	const topic, subject = "srv.public.evolving", "srv.public.evolving-value"
	id := pipeline.TableID{Database: "shop", Schema: "public", Table: "evolving"}
	v1 := &pipeline.Table{ID: id, KeyIdx: []int{0}, Generation: 1, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "n", Type: pipeline.TypeInt64}}}
	v2 := &pipeline.Table{ID: id, KeyIdx: []int{0}, Generation: 2, Columns: append(append([]pipeline.Column(nil), v1.Columns...),
		pipeline.Column{Name: "note", Type: pipeline.TypeString, Nullable: true})}
	v3 := &pipeline.Table{ID: id, KeyIdx: []int{0}, Generation: 3, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "n", Type: pipeline.TypeString},
		{Name: "note", Type: pipeline.TypeString, Nullable: true}}}
	ver := uint64(0)
	ins := func(t *pipeline.Table, vals ...any) pipeline.Record {
		ver++
		return pipeline.Record{Op: pipeline.OpInsert, Table: t, After: vals, Version: pipeline.Version{0, 9, 0, ver}}
	}
	s := openSink(t, k, reg, nil)
	if err := s.Write(t.Context(), []pipeline.Record{ins(v1, int64(1), int64(10)), ins(v1, int64(2), int64(20))}); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(t.Context(), []pipeline.Record{ins(v1, int64(3), int64(30)), ins(v2, int64(4), int64(40), "hi")}); err != nil {
		t.Fatal(err)
	}
	versions := view.versionIDs(t, subject)
	if len(versions) != 2 {
		t.Fatalf("value versions %v, want 2", versions)
	}
	if lvl := view.level(t, subject); lvl != schema.CompatBackward {
		t.Errorf("level %q", lvl)
	}
	got := readTopic(t, k, topic)
	if len(got) != 4 {
		t.Fatalf("%d records", len(got))
	}
	codecs := map[int]*schema.Codec{}
	for i, tbl := range []*pipeline.Table{v1, v2} {
		c, err := schema.NewCodec(tbl, schema.Options{ConnectorName: "postgresql", ServerName: "srv", Unchanged: true})
		if err != nil {
			t.Fatal(err)
		}
		text, _ := schema.SchemaText(c.EnvelopeSchema())
		if reg := view.schema(t, versions[i]); !sameText(reg, text) {
			t.Fatalf("version %d is not shape %d", i+1, i+1)
		}
		codecs[versions[i]] = c
	}
	perID := map[int]int{}
	for _, m := range got {
		sid, payload, err := schema.Unframe(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		c := codecs[sid]
		if c == nil {
			t.Fatalf("record with schema id %d, not a version of %s", sid, subject)
		}
		env, err := c.DecodeEnvelope(payload)
		if err != nil {
			t.Fatalf("decode with id %d: %v", sid, err)
		}
		perID[sid]++
		if (sid == versions[1]) != (len(env.After) == 3) {
			t.Errorf("id %d decoded %v", sid, env.After)
		}
	}
	if perID[versions[0]] != 3 || perID[versions[1]] != 1 {
		t.Errorf("records per schema id %v", perID)
	}

	// Incompatible: n changes from bigint to text; the registry says no.
	before := endOffsets(t, k, topic)
	err := s.Write(t.Context(), []pipeline.Record{ins(v2, int64(5), int64(50), nil), ins(v3, int64(6), "sixty", nil)})
	if err == nil || !pipeline.IsFatal(err) {
		t.Fatalf("incompatible shape under fail: %v", err)
	}
	for _, want := range []string{"column n: type int64 → string", subject, "BACKWARD"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	t.Logf("refused: %v", err)
	if after := endOffsets(t, k, topic); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("records produced despite the refused shape: %v → %v", before, after)
	}
	if n := len(view.versionIDs(t, subject)); n != 2 {
		t.Errorf("%d value versions after the refusal", n)
	}

	s2 := openSink(t, k, reg, func(o *Options) { o.IncompatiblePolicy = PolicyNewSubjectVersion })
	if err := s2.Write(t.Context(), []pipeline.Record{ins(v3, int64(6), "sixty", nil)}); err != nil {
		t.Fatal(err)
	}
	versions = view.versionIDs(t, subject)
	if len(versions) != 3 {
		t.Fatalf("%d value versions, want 3", len(versions))
	}
	if lvl := view.level(t, subject); lvl != schema.CompatBackward {
		t.Errorf("level after the forced version: %q", lvl)
	}
	got = readTopic(t, k, topic)
	if len(got) != 5 {
		t.Fatalf("%d records after the forced version, want 5", len(got))
	}
	c3, err := schema.NewCodec(v3, schema.Options{ConnectorName: "postgresql", ServerName: "srv", Unchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	sid, payload, err := schema.Unframe(got[len(got)-1].Value)
	if err != nil || sid != versions[2] {
		t.Fatalf("last record: schema id %d (versions %v), %v", sid, versions, err)
	}
	if env, err := c3.DecodeEnvelope(payload); err != nil || env.After[1] != "sixty" {
		t.Errorf("decode with version 3: %v %v", env, err)
	}
	// With the level restored, the next incompatible change is refused
	// again.
	v4 := &pipeline.Table{ID: id, KeyIdx: []int{0}, Generation: 4, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "n", Type: pipeline.TypeBool},
		{Name: "note", Type: pipeline.TypeString, Nullable: true}}}
	s3 := openSink(t, k, reg, nil)
	if err := s3.Write(t.Context(), []pipeline.Record{ins(v4, int64(7), true, nil)}); err == nil || !pipeline.IsFatal(err) {
		t.Errorf("incompatible shape after the level was restored: %v", err)
	}
}

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
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// The every-type and evolution checks of TestKafkaSink against a real
// Confluent-compatible registry (Apicurio, started by the harness, with a
// registry-wide BACKWARD rule as Confluent's default) instead of the
// schematest double: the sink reaches it through schema.NewSRClient, and
// the test inspects it only through its REST API, as an operator or a
// consumer would.
func TestKafkaSinkRealRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kafka broker and a schema registry")
	}
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
	t.Run("EveryType", func(t *testing.T) { testEveryTypeRealRegistry(t, k, reg, view) })
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

// testEveryType with the schemas looked up in the real registry.
func testEveryTypeRealRegistry(t *testing.T, k *harness.Kafka, reg schema.Registry, view *restRegistry) {
	s := openSink(t, k, reg, func(o *Options) {
		o.CreateTopics = TopicOptions{Enabled: true, Partitions: 3, ReplicationFactor: 1, Compact: false}
		o.Version = "1.2.3"
	})
	log := everyTypeLog()
	for _, b := range log {
		if err := s.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	const topic = "srv.public.every_type"
	byVersion := map[string]*pipeline.Record{}
	perKey := map[string][]string{}
	for _, b := range log {
		for i := range b {
			r := &b[i]
			if !r.Op.IsData() {
				continue
			}
			byVersion[r.Version.String()] = r
			if r.Op != pipeline.OpTruncate {
				kk := sinktest.Key(r.Key())
				perKey[kk] = append(perKey[kk], r.Version.String())
			}
		}
	}
	codec, err := schema.NewCodec(everyType, schema.Options{ConnectorName: "postgresql", ServerName: "srv", Unchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	keyText, _ := schema.SchemaText(codec.KeySchema())
	envText, _ := schema.SchemaText(codec.EnvelopeSchema())
	texts := map[int]string{}
	lookup := func(id int) string {
		if s, ok := texts[id]; ok {
			return s
		}
		texts[id] = view.schema(t, id)
		return texts[id]
	}

	got := readTopic(t, k, topic)
	seen := map[string][]string{}
	events, tombstones, truncates := 0, 0, 0
	for i, m := range got {
		ver, ok := header(m, headerVersion)
		if !ok {
			t.Fatalf("record %d has no %s header", i, headerVersion)
		}
		in := byVersion[ver]
		if in == nil {
			t.Fatalf("record with unknown version %s", ver)
		}
		if op, _ := header(m, headerOp); op != in.Op.String() {
			t.Errorf("op header %q, want %s", op, in.Op)
		}
		if in.Op == pipeline.OpTruncate {
			truncates++
			if m.Key != nil {
				t.Errorf("truncate with a key")
			}
		} else {
			id, payload, err := schema.Unframe(m.Key)
			if err != nil {
				t.Fatal(err)
			}
			if !sameText(lookup(id), keyText) {
				t.Fatalf("key schema id %d is not the key schema: %s", id, lookup(id))
			}
			key, err := codec.DecodeKey(payload)
			if err != nil {
				t.Fatal(err)
			}
			kk := sinktest.Key(key)
			if kk != sinktest.Key(in.Key()) {
				t.Errorf("key %s, want %s", kk, sinktest.Key(in.Key()))
			}
			if want := javaPartition(m.Key, 3); int(m.Partition) != want {
				t.Errorf("key %s in partition %d, murmur2 says %d", kk, m.Partition, want)
			}
			if m.Value == nil {
				tombstones++
				if in.Op != pipeline.OpDelete || i == 0 || got[i-1].Partition != m.Partition || string(got[i-1].Key) != string(m.Key) {
					t.Errorf("tombstone of %s does not directly follow its delete event", kk)
				}
				continue
			}
			seen[kk] = append(seen[kk], ver)
		}
		events++
		id, payload, err := schema.Unframe(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		text := lookup(id)
		if !sameText(text, envText) {
			t.Fatalf("value schema id %d is not the envelope schema: %s", id, text)
		}
		// The registry's text alone decodes the payload.
		parsed, err := schema.ParseSchemaText(text)
		if err != nil {
			t.Fatal(err)
		}
		var generic map[string]any
		if err := codec.API().Unmarshal(parsed, payload, &generic); err != nil || generic["op"] != in.Op.String() {
			t.Fatalf("generic decode with the registry's schema: %v %v", generic["op"], err)
		}
		env, err := codec.DecodeEnvelope(payload)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("%s %s", in.Op, ver)
		if env.Op != in.Op.String() {
			t.Errorf("%s: op %q", what, env.Op)
		}
		sameImage(t, what+" before", in.Before, env.Before)
		sameImage(t, what+" after", in.After, env.After)
	}
	if want := len(byVersion); events != want {
		t.Errorf("%d events, want %d", events, want)
	}
	if tombstones != 5 || truncates != 1 {
		t.Errorf("%d tombstones (want 5), %d truncates (want 1)", tombstones, truncates)
	}
	for kk, want := range perKey {
		if strings.Join(seen[kk], ",") != strings.Join(want, ",") {
			t.Errorf("key %s: versions %v, want %v", kk, seen[kk], want)
		}
	}
	if subj := view.subjects(t, topic); strings.Join(subj, ",") != topic+"-key,"+topic+"-value" {
		t.Errorf("subjects %v", subj)
	}
	for _, subj := range []string{topic + "-key", topic + "-value"} {
		if ids := view.versionIDs(t, subj); len(ids) != 1 {
			t.Errorf("%s: versions %v, want 1", subj, ids)
		}
		if lvl := view.level(t, subj); lvl != schema.CompatBackward {
			t.Errorf("%s: level %q", subj, lvl)
		}
	}
	// A replay of the first batch is accepted again (at-least-once), by a
	// new sink too (a restarted process: nothing cached).
	if err := s.Write(t.Context(), log[0]); err != nil {
		t.Fatal(err)
	}
	s2 := openSink(t, k, schema.NewSRClient(view.base, schema.SRClientOptions{}), func(o *Options) {
		o.CreateTopics = TopicOptions{Enabled: true, Partitions: 3, ReplicationFactor: 1, Compact: false}
	})
	if err := s2.Write(t.Context(), log[0]); err != nil {
		t.Fatal(err)
	}
	if ids := view.versionIDs(t, topic+"-value"); len(ids) != 1 {
		t.Errorf("value versions %v after the replays, want 1", ids)
	}
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

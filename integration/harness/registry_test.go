package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const registryContentType = "application/vnd.schemaregistry.v1+json"

// registryCall sends a JSON request to the Confluent-compatible API and
// decodes a JSON answer into out (when not nil). It returns the status.
func registryCall(t *testing.T, r *Registry, method, path string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.URL()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if in != nil {
		req.Header.Set("Content-Type", registryContentType)
	}
	req.Header.Set("Accept", registryContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", method, path, err, r.Log())
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %s: decode %q: %v", method, path, resp.Status, raw, err)
		}
	}
	if resp.StatusCode >= 300 {
		t.Logf("%s %s: %s %s", method, path, resp.Status, bytes.TrimSpace(raw))
	}
	return resp.StatusCode
}

const (
	avroV1 = `{"type":"record","name":"Row","namespace":"sluice.test","fields":[{"name":"id","type":"long"}]}`
	// Adds a field without a default: readers of v2 cannot read v1 data, so
	// it is not BACKWARD compatible.
	avroIncompatible = `{"type":"record","name":"Row","namespace":"sluice.test","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"}]}`
	// Adds a field with a default: BACKWARD compatible.
	avroCompatible = `{"type":"record","name":"Row","namespace":"sluice.test","fields":[{"name":"id","type":"long"},{"name":"note","type":["null","string"],"default":null}]}`
)

type registerReq struct {
	Schema string `json:"schema"`
}

type idResp struct {
	ID int `json:"id"`
}

func TestRegistryConfluentAPI(t *testing.T) {
	SkipShort(t, "starts a JVM schema registry")
	start := time.Now()
	r := RegistryT(t)
	t.Logf("apicurio registry %s ready at %s in %s", RegistryVersion, r.URL(), time.Since(start).Round(time.Millisecond))

	const subject = "test-value"
	var subjects []string
	if st := registryCall(t, r, "GET", "/subjects", nil, &subjects); st != 200 || len(subjects) != 0 {
		t.Fatalf("GET /subjects on a new registry: %d %v", st, subjects)
	}

	// Register v1.
	var reg idResp
	if st := registryCall(t, r, "POST", "/subjects/"+subject+"/versions", registerReq{avroV1}, &reg); st != 200 {
		t.Fatalf("register v1: status %d", st)
	}
	if reg.ID <= 0 {
		t.Fatalf("register v1: id %d", reg.ID)
	}

	// Registering the same schema again returns the same id.
	var again idResp
	if st := registryCall(t, r, "POST", "/subjects/"+subject+"/versions", registerReq{avroV1}, &again); st != 200 || again.ID != reg.ID {
		t.Fatalf("re-register v1: status %d id %d, want 200 id %d", st, again.ID, reg.ID)
	}

	// Fetch by id.
	var byID struct {
		Schema     string `json:"schema"`
		SchemaType string `json:"schemaType"`
	}
	if st := registryCall(t, r, "GET", fmt.Sprintf("/schemas/ids/%d", reg.ID), nil, &byID); st != 200 {
		t.Fatalf("GET /schemas/ids/%d: status %d", reg.ID, st)
	}
	if !sameJSON(t, byID.Schema, avroV1) {
		t.Errorf("schema by id = %s, want %s", byID.Schema, avroV1)
	}

	// Latest version of the subject.
	var latest struct {
		Subject string `json:"subject"`
		Version int    `json:"version"`
		ID      int    `json:"id"`
		Schema  string `json:"schema"`
	}
	if st := registryCall(t, r, "GET", "/subjects/"+subject+"/versions/latest", nil, &latest); st != 200 {
		t.Fatalf("GET latest: status %d", st)
	}
	if latest.Subject != subject || latest.Version != 1 || latest.ID != reg.ID {
		t.Errorf("latest = %+v, want subject %s version 1 id %d", latest, subject, reg.ID)
	}

	// Per-subject compatibility.
	var cfg map[string]string
	if st := registryCall(t, r, "PUT", "/config/"+subject, map[string]string{"compatibility": "BACKWARD"}, &cfg); st != 200 {
		t.Fatalf("PUT /config/%s: status %d", subject, st)
	}
	if cfg["compatibility"] != "BACKWARD" {
		t.Errorf("PUT /config answer = %v", cfg)
	}

	type compatResp struct {
		IsCompatible bool `json:"is_compatible"`
	}
	var compat compatResp
	if st := registryCall(t, r, "POST", "/compatibility/subjects/"+subject+"/versions/latest", registerReq{avroIncompatible}, &compat); st != 200 {
		t.Fatalf("compatibility check: status %d", st)
	}
	if compat.IsCompatible {
		t.Errorf("a new field without a default was judged BACKWARD compatible")
	}
	compat = compatResp{}
	if st := registryCall(t, r, "POST", "/compatibility/subjects/"+subject+"/versions/latest", registerReq{avroCompatible}, &compat); st != 200 {
		t.Fatalf("compatibility check: status %d", st)
	}
	if !compat.IsCompatible {
		t.Errorf("a new optional field with a default was judged incompatible")
	}

	// Registering the incompatible schema is refused with 409.
	if st := registryCall(t, r, "POST", "/subjects/"+subject+"/versions", registerReq{avroIncompatible}, nil); st != http.StatusConflict {
		t.Errorf("register incompatible schema: status %d, want 409", st)
	}

	// The compatible one becomes version 2 with a new id.
	var v2 idResp
	if st := registryCall(t, r, "POST", "/subjects/"+subject+"/versions", registerReq{avroCompatible}, &v2); st != 200 {
		t.Fatalf("register compatible v2: status %d", st)
	}
	if v2.ID == reg.ID || v2.ID <= 0 {
		t.Errorf("v2 id %d (v1 id %d)", v2.ID, reg.ID)
	}
	var versions []int
	if st := registryCall(t, r, "GET", "/subjects/"+subject+"/versions", nil, &versions); st != 200 || len(versions) != 2 {
		t.Errorf("versions: status %d %v, want 2 versions", st, versions)
	}

	sstart := time.Now()
	logTail := r.Log()
	if err := r.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	t.Logf("stopped in %s", time.Since(sstart).Round(time.Millisecond))
	if os.Getenv("SLUICE_REGISTRY_DUMP_LOG") != "" {
		t.Log(logTail)
	}
}

func TestRegistryGlobalCompatibility(t *testing.T) {
	SkipShort(t, "starts a JVM schema registry")
	r := RegistryT(t, RegistryOptions{GlobalCompatibility: "BACKWARD"})
	const subject = "global-value"
	var reg idResp
	if st := registryCall(t, r, "POST", "/subjects/"+subject+"/versions", registerReq{avroV1}, &reg); st != 200 {
		t.Fatalf("register v1: status %d", st)
	}
	// No per-subject config: the global rule applies.
	if st := registryCall(t, r, "POST", "/subjects/"+subject+"/versions", registerReq{avroIncompatible}, nil); st != http.StatusConflict {
		t.Errorf("register incompatible schema under a global BACKWARD rule: status %d, want 409", st)
	}
}

func TestRegistryJarEnv(t *testing.T) {
	d := t.TempDir()
	t.Setenv("SLUICE_REGISTRY_JAR", d)
	if _, err := RegistryJar(context.Background()); err == nil {
		t.Fatal("a directory as SLUICE_REGISTRY_JAR was accepted")
	}
	j := filepath.Join(d, "quarkus-run.jar")
	if err := os.WriteFile(j, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_REGISTRY_JAR", j)
	got, err := RegistryJar(context.Background())
	if err != nil || got != j {
		t.Fatalf("RegistryJar = %q, %v; want %q", got, err, j)
	}
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		return false
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

package schema_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
)

// The srclient-backed Registry against Apicurio's Confluent-compatible API
// with a registry-wide BACKWARD rule, where it differs from Confluent's
// registry: /config refuses subjects without versions (the level is set
// after the first registration), and /config NONE only drops the
// subject's rule, leaving the global one in force (NONE is set as an
// explicit subject rule instead, any number of times).
func TestSRClientAgainstApicurio(t *testing.T) {
	harness.SkipShort(t, "starts a JVM schema registry")
	reg := harness.RegistryT(t, harness.RegistryOptions{GlobalCompatibility: schema.CompatBackward})
	ctx := context.Background()
	const subject = "srv.public.t-value"
	id := pipeline.Column{Name: "id", Type: pipeline.TypeInt64, Key: true}
	v1 := valueText(t, id, pipeline.Column{Name: "n", Type: pipeline.TypeInt64})
	bad := valueText(t, id, pipeline.Column{Name: "n", Type: pipeline.TypeString})
	worse := valueText(t, id, pipeline.Column{Name: "n", Type: pipeline.TypeBool})
	level := func() string {
		t.Helper()
		resp, err := http.Get(reg.URL() + "/config/" + subject)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return body["compatibilityLevel"]
	}

	r := schema.NewSRClient(reg.URL(), schema.SRClientOptions{})
	// FULL, not the global BACKWARD, so that it shows the subject's own
	// level was applied.
	if err := r.SetCompatibility(ctx, subject, schema.CompatFull); err != nil {
		t.Fatalf("level of a subject without versions: %v", err)
	}
	if _, err := r.Register(ctx, subject, v1); err != nil {
		t.Fatal(err)
	}
	if got := level(); got != schema.CompatFull {
		t.Errorf("level after the first registration %q, want FULL", got)
	}
	if ok, _, err := r.Compatible(ctx, subject, bad); err != nil || ok {
		t.Fatalf("changed type under FULL: %v %v", ok, err)
	}
	if _, err := r.Register(ctx, subject, bad); err == nil {
		t.Fatal("incompatible schema registered under FULL")
	}
	for range 2 {
		if err := r.SetCompatibility(ctx, subject, schema.CompatNone); err != nil {
			t.Fatalf("NONE: %v", err)
		}
	}
	if ok, _, err := r.Compatible(ctx, subject, bad); err != nil || !ok {
		t.Fatalf("changed type under NONE: %v %v", ok, err)
	}
	if _, err := r.Register(ctx, subject, bad); err != nil {
		t.Fatalf("register under NONE: %v", err)
	}
	if err := r.SetCompatibility(ctx, subject, schema.CompatBackward); err != nil {
		t.Fatal(err)
	}
	if got := level(); got != schema.CompatBackward {
		t.Errorf("level restored to %q, want BACKWARD", got)
	}
	if _, err := r.Register(ctx, subject, worse); err == nil {
		t.Fatal("incompatible schema registered after BACKWARD was restored")
	}
	// NONE on a subject without versions waits for its first version too.
	if err := r.SetCompatibility(ctx, "other-value", schema.CompatNone); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, "other-value", v1); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, "other-value", bad); err != nil {
		t.Errorf("register under a deferred NONE: %v", err)
	}
}

package schema_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/schema/schematest"
)

func valueText(t *testing.T, cols ...pipeline.Column) string {
	t.Helper()
	tb := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "t"}, Columns: cols}
	s, err := schema.ValueSchema(tb, schema.Options{ServerName: "srv"})
	if err != nil {
		t.Fatal(err)
	}
	txt, err := schema.SchemaText(s)
	if err != nil {
		t.Fatal(err)
	}
	return txt
}

// The srclient-backed Registry against a Confluent-API double: basic auth,
// idempotent registration with cached ids, per-subject levels through
// /config, and verbose compatibility answers (a subject without versions
// is compatible).
func TestSRClientAgainstConfluentAPI(t *testing.T) {
	srv := schematest.New(t)
	srv.Username, srv.Password = "sr-user", "sr-secret-pw"
	ctx := context.Background()
	const subject = "srv.public.t-value"
	id := pipeline.Column{Name: "id", Type: pipeline.TypeInt64, Key: true}
	v1 := valueText(t, id, pipeline.Column{Name: "n", Type: pipeline.TypeInt64})
	v2 := valueText(t, id, pipeline.Column{Name: "n", Type: pipeline.TypeInt64}, pipeline.Column{Name: "note", Type: pipeline.TypeString, Nullable: true})
	bad := valueText(t, id, pipeline.Column{Name: "n", Type: pipeline.TypeString})

	anon := schema.NewSRClient(srv.URL, schema.SRClientOptions{})
	if _, err := anon.Register(ctx, subject, v1); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("without credentials: %v", err)
	}

	r := schema.NewSRClient(srv.URL, schema.SRClientOptions{Username: "sr-user", Password: "sr-secret-pw"})
	ok, reason, err := r.Compatible(ctx, subject, v1)
	if err != nil || !ok || reason != "" {
		t.Fatalf("unknown subject: %v %q %v", ok, reason, err)
	}
	if err := r.SetCompatibility(ctx, subject, "backward"); err != nil {
		t.Fatal(err)
	}
	if got := srv.Level(subject); got != schema.CompatBackward {
		t.Errorf("level %q", got)
	}
	id1, err := r.Register(ctx, subject, v1)
	if err != nil {
		t.Fatal(err)
	}
	posts := srv.Requests("POST /subjects/{s}/versions")
	if again, err := r.Register(ctx, subject, v1); err != nil || again != id1 {
		t.Fatalf("again: %d %v", again, err)
	}
	if n := srv.Requests("POST /subjects/{s}/versions"); n != posts {
		t.Errorf("cached registration sent %d more requests", n-posts)
	}
	// A second client (a restarted sluice) gets the same id for the same
	// schema, without a new version.
	r2 := schema.NewSRClient(srv.URL+"/", schema.SRClientOptions{Username: "sr-user", Password: "sr-secret-pw"})
	if again, err := r2.Register(ctx, subject, v1); err != nil || again != id1 {
		t.Fatalf("second client: %d %v", again, err)
	}
	if vs := srv.Mem.Versions(subject); len(vs) != 1 {
		t.Errorf("versions after re-registration: %v", vs)
	}

	if ok, _, err := r.Compatible(ctx, subject, v2); err != nil || !ok {
		t.Fatalf("added nullable column: %v %v", ok, err)
	}
	id2, err := r.Register(ctx, subject, v2)
	if err != nil || id2 == id1 {
		t.Fatalf("v2: %d %v", id2, err)
	}
	ok, reason, err = r.Compatible(ctx, subject, bad)
	if err != nil || ok || !strings.Contains(reason, "n") {
		t.Fatalf("changed type: %v %q %v", ok, reason, err)
	}
	if _, err := r.Register(ctx, subject, bad); err == nil || !strings.Contains(err.Error(), "incompatible") {
		t.Fatalf("incompatible registration: %v", err)
	}
	if err := r.SetCompatibility(ctx, subject, schema.CompatNone); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := r.Compatible(ctx, subject, bad); err != nil || !ok {
		t.Fatalf("under NONE: %v %v", ok, err)
	}
	if _, err := r.Register(ctx, subject, bad); err != nil {
		t.Fatal(err)
	}
	if vs := srv.Mem.Versions(subject); len(vs) != 3 {
		t.Errorf("versions %v", vs)
	}
	if srv.Requests("unknown") != 0 {
		t.Errorf("%d requests to endpoints the double does not know", srv.Requests("unknown"))
	}
}

// TLS to the registry: the configured roots are used, and without them
// the registry's self-signed certificate is refused.
func TestSRClientTLS(t *testing.T) {
	srv := schematest.NewTLS(t)
	ctx := context.Background()
	text := valueText(t, pipeline.Column{Name: "id", Type: pipeline.TypeInt64, Key: true})
	if _, err := schema.NewSRClient(srv.URL, schema.SRClientOptions{}).Register(ctx, "s-value", text); err == nil {
		t.Fatal("untrusted certificate accepted")
	}
	tlsCfg := srv.Client().Transport.(*http.Transport).TLSClientConfig
	r := schema.NewSRClient(srv.URL, schema.SRClientOptions{TLS: tlsCfg})
	if _, err := r.Register(ctx, "s-value", text); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := r.Compatible(ctx, "s-value", text); err != nil || !ok {
		t.Fatalf("compatible over TLS: %v %v", ok, err)
	}
}

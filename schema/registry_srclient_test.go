package schema

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/riferrei/srclient"
	"github.com/sluice-cdc/sluice/pipeline"
)

// The registration path against srclient's own mock client: ids come from
// the client, repeated registrations are served from the cache, and a new
// shape becomes a new version.
func TestSRClientRegisterWithMockClient(t *testing.T) {
	mock := srclient.CreateMockSchemaRegistryClient("http://mock")
	r := newSRRegistry("http://mock", mock, http.DefaultClient, SRClientOptions{})
	ctx := context.Background()

	t1 := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "t"}, KeyIdx: []int{0},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}}}
	t2 := &pipeline.Table{ID: t1.ID, KeyIdx: []int{0}, Generation: 1, Columns: append(append([]pipeline.Column(nil), t1.Columns...),
		pipeline.Column{Name: "note", Type: pipeline.TypeString, Nullable: true})}
	text := func(tb *pipeline.Table) string {
		s, err := ValueSchema(tb, Options{ServerName: "srv"})
		if err != nil {
			t.Fatal(err)
		}
		txt, err := SchemaText(s)
		if err != nil {
			t.Fatal(err)
		}
		return txt
	}
	id1, err := r.Register(ctx, "srv.public.t-value", text(t1))
	if err != nil {
		t.Fatal(err)
	}
	// The mock refuses a duplicate registration; the cache answers first.
	again, err := r.Register(ctx, "srv.public.t-value", text(t1))
	if err != nil || again != id1 {
		t.Fatalf("re-register: id %d (want %d), %v", again, id1, err)
	}
	id2, err := r.Register(ctx, "srv.public.t-value", text(t2))
	if err != nil || id2 == id1 {
		t.Fatalf("second shape: id %d (first %d), %v", id2, id1, err)
	}
	if vs, _ := mock.GetSchemaVersions("srv.public.t-value"); len(vs) != 2 {
		t.Errorf("versions %v, want 2", vs)
	}
	got, err := mock.GetSchema(id2)
	if err != nil || got.Schema() != text(t2) {
		t.Errorf("schema %d: %v", id2, err)
	}

	// A fresh client over the same mock: the duplicate is refused by the
	// mock and not looked up (the mock has no lookup), so the error names
	// the subject.
	fresh := newSRRegistry("http://mock", mock, http.DefaultClient, SRClientOptions{})
	if _, err := fresh.Register(ctx, "srv.public.t-value", text(t1)); err == nil || !strings.Contains(err.Error(), `"srv.public.t-value"`) {
		t.Errorf("fresh duplicate: %v", err)
	}

	// Unknown levels never reach the registry.
	if err := r.SetCompatibility(ctx, "s", "SIDEWAYS"); err == nil {
		t.Error("unknown level accepted")
	}
	// The mock does not implement the config endpoint; the error says so.
	if err := r.SetCompatibility(ctx, "s", "backward"); err == nil || !strings.Contains(err.Error(), "BACKWARD") {
		t.Errorf("mock SetCompatibility: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Register(cctx, "other", text(t1)); err != context.Canceled {
		t.Errorf("cancelled ctx: %v", err)
	}
}

func TestSRClientDefaults(t *testing.T) {
	r := NewSRClient("http://127.0.0.1:1/", SRClientOptions{}).(*srRegistry)
	if r.base != "http://127.0.0.1:1" || r.http.Timeout != 10*time.Second {
		t.Errorf("base %q timeout %v", r.base, r.http.Timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := r.Compatible(ctx, "s", `"string"`); err == nil {
		t.Error("unreachable registry: no error")
	}
}

package tlsconf

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func TestConfig(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Config(ca, "", "", false)
	if err != nil || cfg.RootCAs == nil || cfg.InsecureSkipVerify {
		t.Fatalf("%+v %v", cfg, err)
	}
	// The configured roots verify the server's certificate.
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := cl.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := Config(filepath.Join(dir, "missing.pem"), "", "", false); err == nil {
		t.Error("missing CA file accepted")
	}
	empty := filepath.Join(dir, "empty.pem")
	_ = os.WriteFile(empty, []byte("not a certificate"), 0o600)
	if _, err := Config(empty, "", "", false); err == nil {
		t.Error("CA file without PEM accepted")
	}
	if _, err := Config("", ca, "", false); err == nil {
		t.Error("cert without key accepted")
	}
}

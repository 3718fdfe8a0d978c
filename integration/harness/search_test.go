package harness

import (
	"archive/zip"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSearchNodes starts each engine in turn (never both at once), checks
// that an acknowledged write survives SIGKILL and a restart, that a paused
// node does not answer and a resumed one does, and that Stop cleans up.
func TestSearchNodes(t *testing.T) {
	SkipShort(t, "starts JVM search nodes")
	for _, e := range []struct {
		engine SearchEngine
		start  func(testing.TB, ...SearchOptions) *SearchNode
	}{{OpenSearch, StartOpenSearch}, {Elasticsearch, StartElasticsearch}} {
		t.Run(string(e.engine), func(t *testing.T) {
			begin := time.Now()
			n := e.start(t)
			t.Logf("%s %s ready at %s in %s", n.Engine, n.Version, n.URL, time.Since(begin).Round(time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			c := &http.Client{Timeout: 30 * time.Second}

			// (GET / lives in a module the minimal Elasticsearch
			// distribution lacks; the nodes info API is in the server.)
			info := mustCall(t, c, "GET", n.URL+"/_nodes/_local?filter_path=nodes.*.version", "", 200)
			if !strings.Contains(info, `"version":"`+n.Version+`"`) {
				t.Fatalf("the node does not report version %s: %s", n.Version, info)
			}
			mustCall(t, c, "PUT", n.URL+"/harness/_doc/1", `{"v":1}`, 201)

			n.Kill()
			if _, err := c.Get(n.URL + "/_cluster/health"); err == nil {
				t.Fatal("the node answered after Kill")
			}
			if err := n.Restart(ctx); err != nil {
				t.Fatalf("restart: %v", err)
			}
			if got := mustCall(t, c, "GET", n.URL+"/harness/_doc/1", "", 200); !strings.Contains(got, `"v":1`) {
				t.Fatalf("document after crash and restart: %s", got)
			}

			if err := n.Pause(); err != nil {
				t.Fatal(err)
			}
			quick := &http.Client{Timeout: time.Second}
			if _, err := quick.Get(n.URL + "/_cluster/health"); err == nil {
				t.Fatal("a paused node answered")
			}
			if err := n.Resume(); err != nil {
				t.Fatal(err)
			}
			mustCall(t, c, "GET", n.URL+"/harness/_doc/1", "", 200)

			dist := n.dist.root
			if err := n.Stop(); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{n.Dir, dist} {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Fatalf("Stop left %s behind: %v", d, err)
				}
			}
			if _, err := c.Get(n.URL + "/_cluster/health"); err == nil {
				t.Fatal("the node answered after Stop")
			}
		})
	}
}

func mustCall(t *testing.T, c *http.Client, method, url, body string, want int) string {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, url, resp.StatusCode, want, b)
	}
	return string(b)
}

func TestUnzipRefusesEscapes(t *testing.T) {
	dir := t.TempDir()
	for name, entry := range map[string]string{"escape.zip": "../evil", "ok.zip": "d/f.txt"} {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		zw := zip.NewWriter(f)
		w, err := zw.Create(entry)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("x"))
		if err := errors.Join(zw.Close(), f.Close()); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, strings.TrimSuffix(name, ".zip"))
		err = unzip(p, out)
		if name == "escape.zip" {
			if err == nil || !strings.Contains(err.Error(), "escapes") {
				t.Fatalf("%s: err = %v", name, err)
			}
			continue
		}
		if b, rerr := os.ReadFile(filepath.Join(out, "d", "f.txt")); err != nil || rerr != nil || string(b) != "x" {
			t.Fatalf("%s: %v %v %q", name, err, rerr, b)
		}
	}
	if _, err := StartSearch(context.Background(), "solr", SearchOptions{}); err == nil ||
		!strings.Contains(err.Error(), "unknown search engine") {
		t.Fatalf("err = %v", err)
	}
}

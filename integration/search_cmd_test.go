package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/sinks/bleve"
	"github.com/sluice-cdc/sluice/sources/generate"
)

// `sluice search` answers from the pipeline's embedded index: straight from
// the index directory when no daemon runs (exactly the live rows of the
// feed), and from the running daemon over HTTP while it holds the index.
func TestSearchCommand(t *testing.T) {
	dir := t.TempDir()
	opts := generate.Options{Seed: 21, Tables: 1, InitialRows: 400, Changes: 3000, Batch: 200,
		Mix: generate.Mix{Insert: 30, Update: 50, Delete: 20}}
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: searchable
source:
  generate: {seed: %d, tables: 1, initial_rows: %d, changes: %d, batch: %d, mix: {insert: 30, update: 50, delete: 20}}
sinks:
  - bleve: {path: ./index}
offsets: {dir: ./offsets}
http: {listen: ""}
`, opts.Seed, opts.InitialRows, opts.Changes, opts.Batch))
	d := startDaemon(t, cfg)
	if code := d.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("run exit %d:\n%s", code, d.logs())
	}

	// Offline: every live customer, and those whose name has a given word.
	table := generate.Tables(opts)[0]
	live := generate.Expected(opts, math.MaxInt64)[table.ID]
	var word string
	withWord := 0
	for _, row := range live {
		first := strings.Fields(row[1].(string))[0]
		if word == "" {
			word = strings.ToLower(first)
		}
		if strings.ToLower(first) == word {
			withWord++
		}
	}
	all := runSearch(t, cfg, 0, "--table", table.ID.String(), "--size", "1000", "*")
	if int(all.Total) != len(live) || len(all.Hits) != min(len(live), 1000) {
		t.Fatalf("'*' found %d rows (%d hits), the feed has %d live rows", all.Total, len(all.Hits), len(live))
	}
	named := runSearch(t, cfg, 0, "--size", "1000", "name:"+word)
	if int(named.Total) != withWord {
		t.Fatalf("name:%s found %d rows, want %d", word, named.Total, withWord)
	}
	for _, h := range named.Hits {
		if n, _ := h.Row["name"].(string); !strings.HasPrefix(strings.ToLower(n), word+" ") {
			t.Fatalf("hit %v does not match name:%s", h.Row, word)
		}
	}
	// A query the parser rejects is a usage error.
	if _, code := searchOut(t, cfg, "qty:>"); code != 2 {
		t.Fatalf("bad query: exit %d, want 2", code)
	}

	// Online: a second, unbounded pipeline keeps the index open; search
	// asks the daemon, and reading the locked directory directly says how
	// to reach it.
	dir2 := t.TempDir()
	cfg2 := writeConfig(t, dir2, `pipeline: searchlive
source:
  generate: {seed: 4, tables: 1, initial_rows: 300, rate: 20}
sinks:
  - bleve: {path: ./index}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`)
	d2 := startDaemon(t, cfg2)
	addr := d2.waitAddr(t, time.Minute)
	base := "http://" + addr
	waitUntil(t, d2, time.Minute, "first checkpoint", func() bool { return statusOf(t, base).CheckpointSeq >= 1 })
	res := runSearch(t, cfg2, 0, "--addr", addr, "--size", "5", "*")
	if res.Total < 300 || len(res.Hits) != 5 {
		t.Fatalf("live search: %d rows, %d hits; want >= 300 rows and 5 hits", res.Total, len(res.Hits))
	}
	out, code := searchOut(t, cfg2, "--addr", "127.0.0.1:1", "*")
	if code != 1 || !strings.Contains(out, "--addr") {
		t.Fatalf("search of a held index without its daemon: exit %d: %s", code, out)
	}
	d2.kill()
}

// runSearch runs `sluice search --json` and decodes the result; it fails
// unless the exit code is want.
func runSearch(t *testing.T, cfg string, want int, args ...string) bleve.SearchResult {
	t.Helper()
	out, code := searchOut(t, cfg, append([]string{"--json"}, args...)...)
	if code != want {
		t.Fatalf("sluice search %v: exit %d:\n%s", args, code, out)
	}
	var res bleve.SearchResult
	d := json.NewDecoder(strings.NewReader(out))
	d.UseNumber()
	if err := d.Decode(&res); err != nil {
		t.Fatalf("sluice search %v: %v:\n%s", args, err, out)
	}
	return res
}

func searchOut(t *testing.T, cfg string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(sluiceBinary(t), append([]string{"search", "-c", cfg}, args...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return buf.String(), ee.ExitCode()
		}
		t.Fatal(err)
	}
	return buf.String(), 0
}

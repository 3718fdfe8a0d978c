package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// A value sluice cannot represent (a timestamp past the record model's
// range) is a poison record: in the initial load and in the stream it goes
// to the dead-letter queue with its raw bytes and the reason, and the
// pipeline keeps going.
func TestPoisonRecordsGoToDLQAndPipelineContinues(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "dlq"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "dlq",
		`CREATE TABLE t (id int PRIMARY KEY, ts timestamp, note text)`,
		`INSERT INTO t SELECT g, timestamp '2024-01-01' + g * interval '1 hour', 'n' || g FROM generate_series(1, 100) g`,
		`INSERT INTO t VALUES (101, '294270-01-01 00:00:00', 'poison in the snapshot')`,
	); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pg.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: poison
source:
  postgres:
    dsn: %s
    tables: [public.t]
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, pg.DSN("dlq"))), 0o644)
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d) // the initial load is done
	if err := pg.Exec(ctx, "dlq",
		`INSERT INTO t SELECT g, timestamp '2024-01-01' + g * interval '1 hour', 'n' || g FROM generate_series(102, 150) g`,
		`BEGIN; INSERT INTO t VALUES (201, '294271-06-01 00:00:00', 'poison in the stream'); INSERT INTO t VALUES (151, now(), 'same transaction'); COMMIT`,
		`INSERT INTO t SELECT g, timestamp '2024-01-01' + g * interval '1 hour', 'n' || g FROM generate_series(152, 200) g`,
	); err != nil {
		t.Fatal(err)
	}
	mark := commitMarkOn(t, ctx, pg.DSN("dlq"), `UPDATE t SET note = 'mark' WHERE id = 1`)
	waitSlotConfirmed(t, ctx, pg.DSN("dlq"), "sluice_poison", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	letters := readDeadLetters(t, filepath.Join(dir, "offsets", "dlq", "poison.dlq.jsonl"))
	if len(letters) != 2 {
		t.Fatalf("%d dead letters, want 2: %+v\n%s", len(letters), letters, d.logs())
	}
	for i, want := range []struct{ op, raw string }{{"r", "294270-01-01"}, {"c", "294271-06-01"}} {
		l := letters[i]
		if l.Op != want.op || l.Table != "public.t" || l.Stage != "source" || l.Pipeline != "poison" ||
			!strings.Contains(string(l.Raw), want.raw) || !strings.Contains(l.Error, `"ts"`) {
			t.Errorf("letter %d: %+v raw=%q", i, l, l.Raw)
		}
	}
	// Everything else arrived, including the good row of the poisoned
	// transaction.
	if err := pg.Exec(ctx, "dlq", `DELETE FROM t WHERE id IN (101, 201)`); err != nil {
		t.Fatal(err)
	}
	if n := assertSinkEqualsSource(t, ctx, pg.DSN("dlq"), "dlq", filepath.Join(dir, "sink.duckdb"), "public", "t"); n != 199 {
		t.Fatalf("%d rows compared, want 199", n)
	}
}

// waitFile polls until path exists (the daemon commits its first
// checkpoint when the initial load is durable).
func waitFile(t *testing.T, path string, d *daemonProc) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-d.done:
			t.Fatalf("daemon exited (%d) before %s appeared:\n%s", d.exitCode(), path, d.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared:\n%s", path, d.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A document the search index refuses (a value its mapping cannot parse)
// fails only its record: it goes to the dead-letter queue with the raw
// record and the engine's reason, the records after it are indexed, and
// the pipeline keeps going.
func TestSearchIndexRefusalGoesToDLQ(t *testing.T) {
	pg := harness.PostgresT(t)
	node := harness.StartOpenSearch(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "sdlq"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "sdlq",
		`CREATE TABLE t (id int PRIMARY KEY, note text)`,
		`INSERT INTO t SELECT g, g::text FROM generate_series(1, 50) g`,
	); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: sdlq
source:
  postgres:
    dsn: %s
    tables: [public.t]
sinks:
  - opensearch:
      urls: ["%s"]
      refresh: true
      mappings:
        - {table: public.t, json: '{"properties": {"note": {"type": "integer"}}}'}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, pg.DSN("sdlq"), node.URL))
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	if err := pg.Exec(ctx, "sdlq",
		`INSERT INTO t SELECT g, g::text FROM generate_series(51, 60) g`,
		`INSERT INTO t VALUES (61, 'not a number')`,
		`INSERT INTO t SELECT g, g::text FROM generate_series(62, 70) g`,
	); err != nil {
		t.Fatal(err)
	}
	mark := commitMarkOn(t, ctx, pg.DSN("sdlq"), `UPDATE t SET note = '1000' WHERE id = 1`)
	waitSlotConfirmed(t, ctx, pg.DSN("sdlq"), "sluice_sdlq", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	letters := readDeadLetters(t, filepath.Join(dir, "offsets", "dlq", "sdlq.dlq.jsonl"))
	if len(letters) != 1 {
		t.Fatalf("%d dead letters, want 1: %+v", len(letters), letters)
	}
	l := letters[0]
	if l.Stage != "sink:opensearch" || l.Table != "public.t" || l.Op != "c" || !strings.Contains(string(l.Raw), "not a number") ||
		!strings.Contains(l.Error, "failed to parse field [note]") {
		t.Fatalf("dead letter: %+v raw=%s", l, l.Raw)
	}
	var count struct{ Count int }
	searchGet(t, node.URL+"/public.t-live/_count", nil, &count)
	if count.Count != 69 {
		t.Fatalf("the live index holds %d documents, want the 69 rows other than the refused one", count.Count)
	}
	var doc struct {
		Source struct{ Note json.Number } `json:"_source"`
	}
	searchGet(t, node.URL+"/public.t/_doc/1", nil, &doc)
	if doc.Source.Note != "1000" {
		t.Fatalf("row 1 after the refusal: note %q, want 1000", doc.Source.Note)
	}
}

// readDeadLetters reads a JSON-lines DLQ file.
func readDeadLetters(t *testing.T, path string) []pipeline.DeadLetter {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var letters []pipeline.DeadLetter
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var l pipeline.DeadLetter
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		letters = append(letters, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return letters
}

package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Every kind of problem in one file is reported in one go, in file order,
// each at its own line:col.
func TestAllProblemsTogether(t *testing.T) {
	src := `pipeline: Shop
source:
  generate:
    tables: x
    mix: {insert: 50, update: 50, delete: 0, other: 1}
sinks:
  - duckdb:
      pathh: a
  - duckdb: [1]
offsets: {dir: 5, extra: true}
runtime:
  retry: {initial: 1s, max: 1ms, max_attempts: -1}
  batch_linger: soon
http: {listen: "${PORT}"}
log: {level: loud}
`
	want := []string{
		`pipe.yaml:1:11: pipeline: invalid value "Shop" (hint: must match the pattern ^[a-z][a-z0-9_]{0,62}$)`,
		`pipe.yaml:4:13: source.generate.tables: expected an integer, got "x"`,
		`pipe.yaml:5:46: source.generate.mix.other: unknown field (hint: valid fields are insert, update, delete)`,
		`pipe.yaml:8:7: sinks[0].duckdb.pathh: unknown field (hint: did you mean "path"?)`,
		`pipe.yaml:8:7: sinks[0].duckdb.path: missing required field (hint: add "path:" (the DuckDB database file, e.g. ./sluice.duckdb))`,
		`pipe.yaml:9:13: sinks[1].duckdb: expected a mapping, got a list`,
		`pipe.yaml:10:19: offsets.extra: unknown field (hint: valid fields are dir)`,
		`pipe.yaml:12:48: runtime.retry.max_attempts: must be at least 0, got -1 (hint: the default is 0)`,
		`pipe.yaml:13:17: runtime.batch_linger: expected a duration, got "soon" (hint: write a duration such as 10s, 1m30s or 250ms)`,
		`pipe.yaml:14:16: http.listen: environment variable PORT is not set (hint: export PORT before starting sluice, or give a default with ${PORT:-default})`,
		`pipe.yaml:15:14: log.level: invalid value "loud" (hint: use one of debug, info, warn, error)`,
	}
	_, got := parseErrs(t, src, nil)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// errors.As reaches single problems too.
	_, err := Parse("pipe.yaml", []byte(src), env(nil))
	var one *Error
	if !errors.As(err, &one) || one.Line != 1 || one.Col != 11 || one.Path != "pipeline" {
		t.Errorf("errors.As(*Error) = %+v", one)
	}
}

// A value taken from the environment is never repeated in any message, no
// matter which check rejects it; secret fields are never quoted either.
func TestSecretsNeverEchoed(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	vars := map[string]string{"SECRET": secret, "PG_PASSWORD": secret}
	src := `pipeline: ${SECRET}
source:
  postgres:
    dsn: "${SECRET}://x"
    password: ${PG_PASSWORD}
    tables: ["${SECRET}", "a.${SECRET}.b"]
    full_identity_tables: ["public.${SECRET}"]
    slot: ${SECRET}
    streaming: ${SECRET}
    spill_threshold: ${SECRET}
    heartbeat_interval: x${SECRET}
    snapshot: {mode: "${SECRET}", parallel: "${SECRET}"}
sinks:
  - duckdb: {path: x, name: "${SECRET}", schema: "${SECRET}"}
  - duckdb: {path: y, name: "${SECRET}"}
runtime:
  max_in_flight_records: ${SECRET}
http: {listen: "${SECRET}"}
log: {level: "${SECRET}"}
`
	_, got := parseErrs(t, src, vars)
	if len(got) < 12 {
		t.Fatalf("expected many problems, got:\n%s", strings.Join(got, "\n"))
	}
	all := strings.Join(got, "\n")
	if strings.Contains(all, secret) || strings.Contains(all, "s3cr3t") {
		t.Fatalf("secret leaked:\n%s", all)
	}
	if !strings.Contains(all, "value from ${SECRET}") {
		t.Errorf("messages do not name the variable:\n%s", all)
	}
	// Literal (not interpolated) DSNs may hold passwords too.
	_, got = parseErrs(t, "pipeline: p\nsource:\n  postgres: {dsn: 'postgres://u:hunter2@h:x:y/db%', tables: [t]}\nsinks: [{duckdb: {path: x}}]\n", nil)
	if len(got) != 1 || strings.Contains(got[0], "hunter2") {
		t.Errorf("dsn problem: %q", got)
	}
}

// A minimal file gets every default.
func TestDefaults(t *testing.T) {
	c, errs := parseErrs(t, minimal, nil)
	if errs != nil {
		t.Fatal(errs)
	}
	want := &Config{
		Pipeline: "shop",
		Source: Source{Generate: &GenerateSource{Seed: 1, Tables: 3, InitialRows: 1000, Batch: 500,
			Mix: Mix{Insert: 30, Update: 60, Delete: 10}}},
		Sinks: []Sink{{DuckDB: &DuckDBSink{SinkCommon: SinkCommon{Name: "duckdb"}, Path: "x.duckdb", Schema: "main", TableTemplate: "{schema}_{table}",
			TombstoneTTL: Duration(168 * time.Hour), RowGroupSize: 16384}}},
		Offsets: Offsets{Dir: ".sluice"},
		DLQ:     DLQ{Dir: filepath.Join(".sluice", "dlq")},
		Runtime: Runtime{MaxInFlightRecords: 50000, MaxInFlightBytes: 64 * MiB, BatchMaxRecords: 10000,
			BatchMaxBytes: 16 * MiB, BatchLinger: Duration(100 * time.Millisecond), CheckpointInterval: Duration(time.Second),
			ShutdownTimeout:    Duration(30 * time.Second),
			WriteTimeout:       Duration(2 * time.Minute),
			PipelinedWrites:    3,
			WriteTargetLatency: Duration(2 * time.Second), DegradedAfter: Duration(30 * time.Second), Quarantine: "dlq",
			Retry: Retry{Initial: Duration(100 * time.Millisecond), Max: Duration(30 * time.Second)}},
		Verify: Verify{Sample: VerifySample{Delay: Duration(10 * time.Second), Interval: Duration(5 * time.Second),
			MaxKeysPerSecond: 100, MaxPending: 10000, Settle: Duration(time.Minute)}},
		HTTP: HTTP{Listen: "127.0.0.1:9090"},
		Log:  Log{Level: "info", Format: "json"},
		File: "pipe.yaml",
		Dir:  ".",
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}

	c, errs = parseErrs(t, `pipeline: shop
source:
  postgres:
    dsn: host=db user=sluice password='a b\' c'
    tables: [orders, audit.log]
    full_identity_tables: [log2, orders]
sinks:
  - duckdb: {path: a}
  - duckdb: {path: b, name: second}
  - duckdb: {path: c}
http: {listen: ""}
`, nil)
	if len(errs) != 1 || !strings.Contains(errs[0], "full_identity_tables[0]: table is not in") {
		t.Fatalf("unexpected: %q", errs)
	}
	c, errs = parseErrs(t, strings.Replace(`pipeline: shop
source:
  postgres:
    dsn: host=db user=sluice password='a b\' c'
    tables: [orders, audit.log]
    full_identity_tables: [orders]
sinks:
  - duckdb: {path: a}
  - duckdb: {path: b, name: second}
  - duckdb: {path: c}
http: {listen: ""}
`, "", "", 0), nil)
	if errs != nil {
		t.Fatal(errs)
	}
	p := c.Source.Postgres
	if p.Publication != "sluice_shop" || p.Slot != "sluice_shop" || !p.Streaming ||
		p.SpillThreshold != 64*MiB || p.HeartbeatInterval.Std() != 10*time.Second ||
		p.StatusInterval.Std() != 10*time.Second || p.ReconnectBackoff != (ReconnectBackoff{Duration(time.Second), Duration(30 * time.Second)}) ||
		p.Snapshot != (Snapshot{Mode: "initial", Parallel: 2, ChunkRows: 100000, ChunkTime: Duration(500 * time.Millisecond), MaxChunkRows: 65536, MaxChunkBytes: 16 << 20}) {
		t.Errorf("postgres defaults: %+v", p)
	}
	if !reflect.DeepEqual(p.Tables, []string{"public.orders", "audit.log"}) || !reflect.DeepEqual(p.FullIdentityTables, []string{"public.orders"}) {
		t.Errorf("tables not qualified: %q %q", p.Tables, p.FullIdentityTables)
	}
	var names []string
	for _, s := range c.Sinks {
		names = append(names, s.Kind()+":"+s.Name())
	}
	if strings.Join(names, ",") != "duckdb:duckdb_0,duckdb:second,duckdb:duckdb_2" {
		t.Errorf("sink names %v", names)
	}
	if c.HTTP.Listen != "" {
		t.Errorf("explicit empty listen replaced by default: %q", c.HTTP.Listen)
	}
	if c.Source.Kind() != "postgres" {
		t.Errorf("kind %q", c.Source.Kind())
	}
}

func TestInterpolation(t *testing.T) {
	src := `pipeline: ${NAME}
source:
  generate:
    batch: ${BATCH}
    rate: ${RATE:-2.5}
    seed: ${UNSET-7}
    initial_rows: ${EMPTY:-5}
sinks:
  - duckdb:
      path: "$$HOME/a$b/${EMPTY-x}${EMPTY}.duckdb"
      hard_delete: ${YES}
`
	c, errs := parseErrs(t, src, map[string]string{"NAME": "shop", "BATCH": "42", "EMPTY": "", "YES": "true"})
	if errs != nil {
		t.Fatal(errs)
	}
	g := c.Source.Generate
	if c.Pipeline != "shop" || g.Batch != 42 || g.Rate != 2.5 || g.Seed != 7 || g.InitialRows != 5 || !c.Sinks[0].DuckDB.HardDelete {
		t.Errorf("got %+v %+v", c, g)
	}
	if got := c.Sinks[0].DuckDB.Path; got != filepath.Join("$HOME", "a$b", ".duckdb") {
		t.Errorf("path %q", got)
	}
}

func TestAnchorsAndMerge(t *testing.T) {
	src := `pipeline: shop
source:
  generate: {}
x-common: &common {schema: raw, hard_delete: true}
sinks:
  - duckdb: {<<: *common, path: a, name: a}
  - duckdb: {<<: *common, path: b, name: b, schema: other}
`
	_, errs := parseErrs(t, src, nil)
	if len(errs) != 1 || !strings.Contains(errs[0], "x-common: unknown field") {
		t.Fatalf("unexpected: %q", errs)
	}
	src = strings.Replace(src, "x-common: &common {schema: raw, hard_delete: true}\n", "", 1)
	src = strings.Replace(src, "  - duckdb: {<<: *common, path: a, name: a}", "  - duckdb: &first {schema: raw, hard_delete: true, path: a, name: a}", 1)
	src = strings.Replace(src, "{<<: *common, path: b,", "{<<: *first, path: b,", 1)
	c, errs := parseErrs(t, src, nil)
	if errs != nil {
		t.Fatal(errs)
	}
	b := c.Sinks[1].DuckDB
	if b.Schema != "other" || !b.HardDelete || b.Name != "b" || b.Path != "b" {
		t.Errorf("merged sink %+v", b)
	}
}

func TestPathResolution(t *testing.T) {
	src := minimal + "offsets: {dir: state}\ndlq: {dir: ../dead}\n"
	c, errs := parseErrs(t, src, nil)
	if errs != nil {
		t.Fatal(errs)
	}
	_ = c
	c, err := Parse(filepath.Join("etc", "sluice", "pipe.yaml"), []byte(src), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Offsets.Dir != filepath.Join("etc", "sluice", "state") || c.DLQ.Dir != filepath.Join("etc", "dead") ||
		c.Sinks[0].DuckDB.Path != filepath.Join("etc", "sluice", "x.duckdb") {
		t.Errorf("relative to name: %q %q %q", c.Offsets.Dir, c.DLQ.Dir, c.Sinks[0].DuckDB.Path)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "pipe.yaml")
	abs := filepath.Join(dir, "elsewhere", "db.duckdb")
	body := "pipeline: shop\nsource: {generate: {}}\nsinks:\n  - duckdb: {path: ./db.duckdb}\n  - duckdb: {path: " + abs + "}\n  - duckdb: {path: ':memory:'}\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if c.Offsets.Dir != filepath.Join(dir, ".sluice") || c.DLQ.Dir != filepath.Join(dir, ".sluice", "dlq") || c.Dir != dir {
		t.Errorf("Load dirs: %q %q %q", c.Offsets.Dir, c.DLQ.Dir, c.Dir)
	}
	if c.Sinks[0].DuckDB.Path != filepath.Join(dir, "db.duckdb") || c.Sinks[1].DuckDB.Path != abs || c.Sinks[2].DuckDB.Path != ":memory:" {
		t.Errorf("Load sink paths: %q %q %q", c.Sinks[0].DuckDB.Path, c.Sinks[1].DuckDB.Path, c.Sinks[2].DuckDB.Path)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

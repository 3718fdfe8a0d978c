package config

import (
	"errors"
	"strings"
	"testing"
)

// env returns a lookup function over m.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// parseErrs parses src and returns the printed problems (nil when valid).
func parseErrs(t *testing.T, src string, vars map[string]string) (*Config, []string) {
	t.Helper()
	c, err := Parse("pipe.yaml", []byte(src), env(vars))
	if err == nil {
		if c == nil {
			t.Fatal("nil config without error")
		}
		return c, nil
	}
	var es *Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, not *Errors: %v", err, err)
	}
	if c != nil {
		t.Fatal("config returned with an error")
	}
	var lines []string
	for _, e := range es.List {
		lines = append(lines, e.Error())
	}
	if got := strings.Join(lines, "\n"); got != err.Error() {
		t.Fatalf("Errors.Error() does not print one problem per line:\n%s", err)
	}
	return nil, lines
}

const minimal = `pipeline: shop
source:
  generate: {}
sinks:
  - duckdb:
      path: ./x.duckdb
`

func TestProblems(t *testing.T) {
	tests := []struct {
		name string
		src  string
		env  map[string]string
		want []string // each must equal one reported line, in order
	}{
		{
			name: "unknown key with suggestion",
			src: `pipeline: shop
source:
  generate: {}
sinks:
  - duckdb:
      pathh: ./x.duckdb
      path: ./x.duckdb
`,
			want: []string{`pipe.yaml:6:7: sinks[0].duckdb.pathh: unknown field (hint: did you mean "path"?)`},
		},
		{
			name: "unknown key without close match lists valid keys",
			src:  minimal + "log:\n  colour: true\n",
			want: []string{`pipe.yaml:8:3: log.colour: unknown field (hint: valid fields are level, format)`},
		},
		{
			name: "camel case key suggests snake case",
			src:  minimal + "runtime:\n  batchMaxRecords: 10\n",
			want: []string{`pipe.yaml:8:3: runtime.batchMaxRecords: unknown field (hint: did you mean "batch_max_records"?)`},
		},
		{
			name: "setting written where the sink kind belongs",
			src:  "pipeline: shop\nsource:\n  generate: {}\nsinks:\n  - path: x\n",
			want: []string{`pipe.yaml:5:5: sinks[0].path: unknown kind (hint: "path" is a setting of duckdb; put it under "duckdb:")`},
		},
		{
			name: "sink routing patterns and a per-sink kafka dlq",
			src: `pipeline: shop
source:
  generate: {}
sinks:
  - redis:
      addr: 127.0.0.1:6379
      tabels: [public.a]
      tables: [orders, "public.[x"]
      columns:
        exclude: [public.users.email.x]
      dlq:
        kafka: {brokers: [127.0.0.1:9092]}
`,
			want: []string{
				`pipe.yaml:7:7: sinks[0].redis.tabels: unknown field (hint: did you mean "tables"?)`,
				`pipe.yaml:8:16: sinks[0].redis.tables[0]: pattern "orders" has 1 dot-separated parts, want 2 (hint: write "schema.table", e.g. public.orders or "public.*"; * and ? match within one part)`,
				`pipe.yaml:8:24: sinks[0].redis.tables[1]: pattern "public.[x": syntax error in pattern (hint: write "schema.table", e.g. public.orders or "public.*"; * and ? match within one part)`,
				`pipe.yaml:10:19: sinks[0].redis.columns.exclude[0]: pattern "public.users.email.x" has 4 dot-separated parts, want 3 (hint: write "schema.table.column", e.g. "public.*.password"; * and ? match within one part)`,
				`pipe.yaml:12:16: sinks[0].redis.dlq.kafka.topic: missing required field (hint: add "topic:" (e.g. shop.dlq))`,
			},
		},
		{
			name: "string where an integer is wanted",
			src:  "pipeline: shop\nsource:\n  generate:\n    tables: three\nsinks:\n  - duckdb: {path: x}\n",
			want: []string{`pipe.yaml:4:13: source.generate.tables: expected an integer, got "three"`},
		},
		{
			name: "quoted number",
			src:  "pipeline: shop\nsource:\n  generate:\n    batch: \"10\"\nsinks:\n  - duckdb: {path: x}\n",
			want: []string{`pipe.yaml:4:12: source.generate.batch: expected an integer, got "10" (hint: remove the quotes)`},
		},
		{
			name: "mapping where a list is wanted",
			src:  "pipeline: shop\nsource:\n  generate: {}\nsinks:\n  duckdb:\n    path: x\n",
			want: []string{`pipe.yaml:5:3: sinks: expected a list, got a mapping (hint: write list items on their own lines starting with "- ")`},
		},
		{
			name: "scalar where a mapping is wanted",
			src:  minimal + "runtime: fast\n",
			want: []string{`pipe.yaml:7:10: runtime: expected a mapping, got "fast" (hint: write nested "key: value" lines indented below this key)`},
		},
		{
			name: "bool",
			src:  "pipeline: shop\nsource:\n  generate: {}\nsinks:\n  - duckdb: {path: x, hard_delete: yes}\n",
			want: []string{`pipe.yaml:5:36: sinks[0].duckdb.hard_delete: expected true or false, got "yes"`},
		},
		{
			name: "missing required fields",
			src:  "source:\n  postgres:\n    tables: [a]\n",
			want: []string{
				`pipe.yaml:1:1: pipeline: missing required field (hint: add "pipeline:" (a name such as shop))`,
				`pipe.yaml:1:1: sinks: missing required field (hint: add "sinks:" (a list with at least one sink, e.g. - duckdb: {path: ./sluice.duckdb}))`,
				`pipe.yaml:3:5: source.postgres.dsn: missing required field (hint: add "dsn:" (e.g. postgres://user@127.0.0.1:5432/db))`,
			},
		},
		{
			name: "required but null or empty",
			src:  "pipeline:\nsource:\n  generate: {}\nsinks: []\n",
			want: []string{
				`pipe.yaml:1:1: pipeline: missing required field (hint: add "pipeline:" (a name such as shop))`,
				`pipe.yaml:4:8: sinks: must not be empty (hint: set it (a list with at least one sink, e.g. - duckdb: {path: ./sluice.duckdb}))`,
			},
		},
		{
			name: "invalid enum with suggestion",
			src:  minimal + "log:\n  level: warning\n  format: text\n",
			want: []string{
				`pipe.yaml:8:10: log.level: invalid value "warning" (hint: did you mean "warn"? allowed: debug, info, warn, error)`,
				`pipe.yaml:9:11: log.format: invalid value "text" (hint: use one of json, console)`,
			},
		},
		{
			name: "invalid pattern",
			src:  strings.Replace(minimal, "pipeline: shop", "pipeline: Shop-1", 1),
			want: []string{`pipe.yaml:1:11: pipeline: invalid value "Shop-1" (hint: must match the pattern ^[a-z][a-z0-9_]{0,62}$)`},
		},
		{
			name: "range",
			src:  "pipeline: shop\nsource:\n  generate:\n    tables: 4\n    batch: 0\nsinks:\n  - duckdb: {path: x}\n",
			want: []string{
				`pipe.yaml:4:13: source.generate.tables: must be between 1 and 3, got 4 (hint: the default is 3)`,
				`pipe.yaml:5:12: source.generate.batch: must be between 1 and 100000, got 0 (hint: the default is 500)`,
			},
		},
		{
			name: "duration and byte size",
			src:  minimal + "runtime:\n  batch_linger: 10\n  max_in_flight_bytes: 512KiB\n  checkpoint_interval: 7d\n  batch_max_bytes: 1.5XB\n",
			want: []string{
				`pipe.yaml:8:17: runtime.batch_linger: duration has no unit, got 10 (hint: add a unit: ns, us, ms, s, m or h, e.g. 10s)`,
				`pipe.yaml:9:24: runtime.max_in_flight_bytes: must be at least 1MiB, got "512KiB" (hint: the default is 64MiB)`,
				`pipe.yaml:10:24: runtime.checkpoint_interval: expected a duration, got "7d" (hint: days are not a unit; use hours, e.g. 168h)`,
				`pipe.yaml:11:20: runtime.batch_max_bytes: unknown byte size unit, got "1.5XB" (hint: use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)`,
			},
		},
		{
			name: "mix must sum to 100",
			src:  "pipeline: shop\nsource:\n  generate:\n    mix: {insert: 50}\nsinks:\n  - duckdb: {path: x}\n",
			want: []string{`pipe.yaml:4:10: source.generate.mix: percentages sum to 120, not 100 (hint: entries left out default to insert 30, update 60, delete 10; make the three add up to 100)`},
		},
		{
			name: "missing env var",
			src:  "pipeline: shop\nsource:\n  postgres:\n    dsn: postgres://u@h/db\n    password: ${PG_PASSWORD}\n    tables: [t]\nsinks:\n  - duckdb: {path: x}\n",
			want: []string{`pipe.yaml:5:15: source.postgres.password: environment variable PG_PASSWORD is not set (hint: export PG_PASSWORD before starting sluice, or give a default with ${PG_PASSWORD:-default})`},
		},
		{
			name: "malformed variable reference",
			src:  strings.Replace(minimal, "./x.duckdb", "${1BAD}", 1),
			want: []string{`pipe.yaml:6:13: sinks[0].duckdb.path: malformed variable reference (hint: use ${NAME}, ${NAME:-default} or ${NAME-default} with NAME made of letters, digits and _; write $$ for a literal $)`},
		},
		{
			name: "no source kind",
			src:  "pipeline: shop\nsource: {}\nsinks:\n  - duckdb: {path: x}\n",
			want: []string{`pipe.yaml:2:9: source: expected exactly one of generate, mysql, postgres, got none (hint: add one of: generate, mysql, postgres)`},
		},
		{
			name: "both source kinds",
			src:  "pipeline: shop\nsource:\n  generate: {}\n  postgres: {dsn: 'host=h', tables: [t]}\nsinks:\n  - duckdb: {path: x}\n",
			want: []string{`pipe.yaml:4:3: source: only one of generate, mysql, postgres may be set, but generate is set too (hint: remove all but one)`},
		},
		{
			name: "unknown source kind",
			src:  "pipeline: shop\nsource:\n  postgress: {}\nsinks:\n  - duckdb: {path: x}\n",
			want: []string{`pipe.yaml:3:3: source.postgress: unknown kind (hint: did you mean "postgres"?)`},
		},
		{
			name: "duplicate sink names",
			src:  "pipeline: shop\nsource:\n  generate: {}\nsinks:\n  - duckdb: {path: a, name: wh}\n  - duckdb: {path: b}\n  - duckdb: {path: c, name: wh}\n  - duckdb: {path: d, name: duckdb_1}\n",
			want: []string{
				`pipe.yaml:7:29: sinks[2].duckdb.name: duplicate sink name "wh" (also used by sinks[0]) (hint: give every sink a distinct name:)`,
				`pipe.yaml:8:29: sinks[3].duckdb.name: duplicate sink name "duckdb_1" (also used by sinks[1]) (hint: give every sink a distinct name:)`,
			},
		},
		{
			name: "duplicate key",
			src:  minimal + "pipeline: other\n",
			want: []string{`pipe.yaml:7:1: pipeline: duplicate key (first set at line 1) (hint: remove one of them)`},
		},
		{
			name: "postgres cross-field rules",
			src: `pipeline: shop
source:
  postgres:
    dsn: mysql://u@h/db
    tables: [orders, public.orders, "a.b.c"]
    full_identity_tables: [events]
    slot: Bad
    reconnect_backoff: {initial: 1m, max: 1s}
sinks:
  - duckdb: {path: x}
http:
  listen: localhost
`,
			want: []string{
				`pipe.yaml:4:10: source.postgres.dsn: connection URL has an unsupported scheme (hint: use a postgres:// URL or key=value pairs such as host=127.0.0.1 dbname=db)`,
				`pipe.yaml:5:22: source.postgres.tables[1]: table listed twice (also tables[0]) (hint: remove the duplicate)`,
				`pipe.yaml:5:37: source.postgres.tables[2]: invalid table name "a.b.c" (hint: write "schema.table" or "table" (schema public), using letters, digits and _)`,
				`pipe.yaml:6:28: source.postgres.full_identity_tables[0]: table is not in source.postgres.tables (hint: add it to tables or remove it here)`,
				`pipe.yaml:7:11: source.postgres.slot: invalid value "Bad" (hint: must match the pattern ^[a-z_][a-z0-9_]{0,62}$)`,
				`pipe.yaml:8:34: source.postgres.reconnect_backoff.initial: initial delay 1m0s is longer than max 1s (hint: lower initial or raise max)`,
				`pipe.yaml:12:11: http.listen: expected host:port, got "localhost" (hint: e.g. 127.0.0.1:9090 or :9090; use "" to disable the server)`,
			},
		},
		{
			name: "continuous verification without a database",
			src:  minimal + "verify:\n  sample: {rate: 0.5}\n",
			want: []string{`pipe.yaml:8:18: verify.sample.rate: continuous verification reads the source database, and the generate source has none (hint: use a postgres or mysql source, or set rate: 0)`},
		},
		{
			name: "sample rate above 1",
			src:  minimal + "verify:\n  sample: {rate: 2}\n",
			want: []string{`pipe.yaml:8:18: verify.sample.rate: must be between 0 and 1, got 2 (hint: the default is 0)`},
		},
		{
			name: "default slot name too long",
			src:  "pipeline: " + strings.Repeat("p", 60) + "\nsource:\n  postgres: {dsn: 'host=h', tables: [t], slot: s}\nsinks:\n  - duckdb: {path: x}\n",
			want: []string{`pipe.yaml:1:11: pipeline: too long for the default publication name sluice_<pipeline> (at most 63 characters) (hint: shorten pipeline to at most 56 characters, or set source.postgres.publication)`},
		},
		{
			name: "batch larger than in-flight cap",
			src:  minimal + "runtime:\n  max_in_flight_records: 10\n",
			want: []string{`pipe.yaml:8:26: runtime.max_in_flight_records: must be at least runtime.batch_max_records (10000) (hint: a batch larger than the in-flight cap could never be admitted; lower the batch limit or raise the cap)`},
		},
		{
			name: "syntax error",
			src:  "pipeline: shop\nsource: [\n",
			want: []string{`pipe.yaml:2: invalid YAML: did not find expected node content`},
		},
		{
			name: "empty file",
			src:  "# nothing\n",
			want: []string{`pipe.yaml:1:1: the file is empty (hint: start with pipeline: <name>; see configs/reference.yaml)`},
		},
		{
			name: "not a mapping",
			src:  "- a\n",
			want: []string{`pipe.yaml:1:1: expected a mapping, got a list`},
		},
		{
			name: "two documents",
			src:  minimal + "---\n" + minimal,
			want: []string{`pipe.yaml:7:1: more than one YAML document (hint: one file configures one pipeline; remove the --- separator)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got := parseErrs(t, tt.src, tt.env)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

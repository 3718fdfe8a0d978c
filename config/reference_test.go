package config

import (
	"encoding"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const configsDir = "../configs"

// testEnv is the environment the shipped configs are validated with.
var testEnv = map[string]string{"PG_PASSWORD": "not-a-real-password", "KAFKA_PASSWORD": "not-a-real-password",
	"SCHEMA_REGISTRY_PASSWORD": "not-a-real-password", "MYSQL_PASSWORD": "not-a-real-password",
	"MASK_KEY": "not-a-real-key"}

// schemaPaths lists every YAML key path of t ("sinks[].duckdb.path").
func schemaPaths(prefix string, t reflect.Type, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice {
		schemaPaths(prefix+"[]", t.Elem(), out)
		return
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return
	}
	for _, f := range fieldsOf(t) {
		p := join(prefix, f.key)
		out[p] = true
		schemaPaths(p, t.FieldByIndex(f.index).Type, out)
	}
}

// nodePaths lists every key path of a YAML node tree.
func nodePaths(prefix string, n *yaml.Node, out map[string]bool) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			nodePaths(prefix, c, out)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			nodePaths(prefix+"[]", c, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(prefix, n.Content[i].Value)
			out[p] = true
			nodePaths(p, n.Content[i+1], out)
		}
	}
}

// sharedOnce folds the paths of settings that several places share, so
// that reference.yaml documents each of them once: the keys every sink kind
// takes (SinkCommon) under any one kind, the elasticsearch kind's under
// opensearch, and the keys of a Kafka
// dead-letter topic under any one dlq.kafka block.
func sharedOnce(paths map[string]bool) map[string]bool {
	common := map[string]bool{}
	for _, f := range fieldsOf(reflect.TypeFor[SinkCommon]()) {
		common[f.key] = true
	}
	out := map[string]bool{}
	for p := range paths {
		parts := strings.Split(p, ".")
		if len(parts) >= 3 && parts[0] == "sinks[]" && common[parts[2]] {
			parts[1] = "*"
		}
		// elasticsearch and opensearch take the same settings (IndexSink).
		if len(parts) >= 2 && parts[0] == "sinks[]" && parts[1] == "elasticsearch" {
			parts[1] = "opensearch"
		}
		p = strings.Join(parts, ".")
		if i := strings.Index(p, "dlq.kafka"); i >= 0 {
			p = "(kafka dlq)" + p[i+len("dlq.kafka"):]
		}
		out[p] = true
	}
	return out
}

// commentedKey matches a commented-out setting such as "  #   seed: 1":
// alternatives that cannot be active at the same time (the generate source
// next to postgres) are documented that way.
var commentedKey = regexp.MustCompile(`^(\s*)# (\s*(?:- )?[a-z_]+:(?: .*)?)$`)

// uncomment turns commented-out settings back into YAML.
func uncomment(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if m := commentedKey.FindStringSubmatch(l); m != nil {
			lines[i] = m[1] + m[2]
		}
	}
	return strings.Join(lines, "\n")
}

func sorted(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// reference.yaml documents every key of the schema, each with a comment,
// and nothing else; it is itself a valid config.
func TestReferenceComplete(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(configsDir, "reference.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	full := uncomment(string(raw))
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(full), &doc); err != nil {
		t.Fatalf("reference.yaml with alternatives uncommented: %v", err)
	}
	want, got := map[string]bool{}, map[string]bool{}
	schemaPaths("", reflect.TypeFor[Config](), want)
	nodePaths("", &doc, got)
	want, got = sharedOnce(want), sharedOnce(got)
	for _, p := range sorted(want) {
		if !got[p] {
			t.Errorf("reference.yaml does not document %s", p)
		}
	}
	for _, p := range sorted(got) {
		if !want[p] {
			t.Errorf("reference.yaml documents %s, which the schema does not have", p)
		}
	}

	// Every key line is explained by a comment right above it or on it.
	keyLine := regexp.MustCompile(`^\s*(?:- )?[a-z_]+:`)
	lines := strings.Split(full, "\n")
	for i, l := range lines {
		if !keyLine.MatchString(l) || strings.Contains(l, " # ") {
			continue
		}
		j := i - 1
		for j >= 0 && strings.TrimSpace(lines[j]) == "" {
			j--
		}
		if j < 0 || !strings.HasPrefix(strings.TrimSpace(lines[j]), "#") {
			t.Errorf("reference.yaml line %d (%s) has no comment", i+1, strings.TrimSpace(l))
		}
	}

	// As shipped it is valid; with the alternative sources uncommented the
	// only problems are that several sources are set, so those blocks are
	// valid too.
	if _, err := Parse("reference.yaml", raw, env(testEnv)); err != nil {
		t.Errorf("reference.yaml:\n%v", err)
	}
	_, err = Parse("reference.yaml", []byte(full), env(testEnv))
	var es *Errors
	// Two alternatives (generate and mysql) sit next to postgres.
	if !errors.As(err, &es) || len(es.List) != 2 {
		t.Fatalf("reference.yaml with the alternatives uncommented: %v", err)
	}
	for _, e := range es.List {
		if !strings.Contains(e.Msg, "only one of generate, mysql, postgres") {
			t.Errorf("reference.yaml with the alternatives uncommented: %v", err)
		}
	}
}

// Every shipped config is valid.
func TestShippedConfigs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(configsDir, "*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("configs: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Parse(f, data, env(testEnv)); err != nil {
				t.Errorf("%v", err)
			}
		})
	}

	abs, _ := filepath.Abs(configsDir)
	t.Setenv("PG_PASSWORD", "from-env")
	q, err := Load(filepath.Join(configsDir, "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	g := q.Source.Generate
	if g == nil || g.Changes != 0 || g.Rate != 2000 || q.Sinks[0].DuckDB.Path != filepath.Join(abs, "quickstart.duckdb") ||
		q.Offsets.Dir != filepath.Join(abs, ".sluice", "quickstart") {
		t.Errorf("quickstart: %+v %+v", q, g)
	}
	p, err := Load(filepath.Join(configsDir, "postgres-duckdb.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Source.Postgres == nil || p.Source.Postgres.Password != "from-env" ||
		!strings.Contains(p.Source.Postgres.DSN, "@127.0.0.1:5432/") {
		t.Errorf("postgres-duckdb: %+v", p.Source.Postgres)
	}

	data, _ := os.ReadFile(filepath.Join(configsDir, "postgres-duckdb.yaml"))
	_, err = Parse("postgres-duckdb.yaml", data, env(nil))
	if err == nil || !strings.Contains(err.Error(), "environment variable PG_PASSWORD is not set") {
		t.Errorf("without PG_PASSWORD: %v", err)
	}
}

// Every default, min and max tag of the schema parses.
func TestSchemaTags(tt *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] || reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
			return
		}
		seen[t] = true
		d := newDecoder("tags")
		for _, f := range fieldsOf(t) {
			ft := t.FieldByIndex(f.index).Type
			for _, tag := range []string{f.def, f.min, f.max} {
				if tag != "" && ft.Kind() != reflect.Slice {
					d.setTag(reflect.New(ft).Elem(), tag, t.Name()+"."+f.key, "test")
				}
			}
			if f.hasDef && f.required {
				tt.Errorf("%s.%s is required and has a default", t.Name(), f.key)
			}
			walk(ft)
		}
	}
	walk(reflect.TypeFor[Config]())
}

package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, returns either a config or
// *Errors, and never repeats an environment value in an error message.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(configsDir, "*.yaml"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(minimal))
	f.Add([]byte("pipeline: ${SECRET}\nsource: {postgres: {dsn: '${SECRET}', tables: [\"${SECRET:-x}\"]}}\nsinks: [{duckdb: {path: $${X}}}]\n"))
	f.Add([]byte("a: &a [*a]\nsinks: [*a, {<<: *a}]\n"))
	f.Add([]byte("source:\n  generate:\n    mix: {<<: [{insert: 1}], delete: 99}\n"))

	const secret = "Zq9SECRETvalue"
	lookup := env(map[string]string{"SECRET": secret, "PG_PASSWORD": secret, "EMPTY": ""})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data, lookup)
		if err == nil {
			if c == nil {
				t.Fatal("nil config without error")
			}
			return
		}
		if c != nil {
			t.Fatal("config returned with an error")
		}
		var es *Errors
		if !errors.As(err, &es) || len(es.List) == 0 {
			t.Fatalf("error is not a non-empty *Errors: %T %v", err, err)
		}
		for _, e := range es.List {
			if e.Msg == "" {
				t.Fatalf("empty message: %+v", e)
			}
		}
		if !bytes.Contains(data, []byte(secret)) && strings.Contains(err.Error(), secret) {
			t.Fatalf("environment value leaked:\n%v", err)
		}
	})
}

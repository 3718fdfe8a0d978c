package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

func TestStatsAndReport(t *testing.T) {
	var r ScenarioResult
	for _, v := range []float64{30, 10, 20} {
		r.Add([]Figure{{Name: "decoder", Unit: "rows/s", Value: v * 1000}, {Name: "ratio", Unit: "ratio", Value: v / 10, Target: ">= 1.0"}})
	}
	if s := r.Stats[0]; s.Median != 20000 || s.Min != 10000 || s.Max != 30000 || len(s.Runs) != 3 {
		t.Fatalf("stat: %+v", s)
	}
	r.Add([]Figure{{Name: "ratio", Unit: "ratio", Value: 4}})
	if s := r.Stats[1]; s.Median != 2.5 || s.Target != ">= 1.0" {
		t.Fatalf("even count median: %+v", s)
	}
	rep := Report{Time: time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC), Machine: Machine{CPUs: 2, CPUModel: "test", MemBytes: 1 << 30,
		Versions: map[string]string{"MariaDB": "10.11"}}, Scenarios: []ScenarioResult{{Name: "x", Stats: r.Stats}}}
	md := rep.Markdown()
	for _, want := range []string{"### x (4 runs)", "| decoder (rows/s) | 20000 | 10000–30000 |  |", "| ratio (ratio) | 2.500 | 1.000–4.000 | >= 1.0 |",
		"Versions: MariaDB 10.11."} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	dir := t.TempDir()
	if _, err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	var back Report
	raw, err := os.ReadFile(filepath.Join(dir, "latest.json"))
	if err != nil || json.Unmarshal(raw, &back) != nil || back.Scenarios[0].Stats[0].Median != 20000 {
		t.Fatalf("latest.json: %v %s", err, raw)
	}
}

// The scenario runs end to end on a small workload and reports every
// figure (its speed is what `make bench` measures, not this test).
func TestMariaDBScenarioReportsEveryFigure(t *testing.T) {
	harness.SkipShort(t, "starts MariaDB and runs the scenario")
	versions := map[string]string{}
	figs, err := MariaDBBinlog{}.Run(RunOptions{Rows: 5000, Versions: versions, Log: t.Logf})
	if err != nil {
		harness.SkipOrFail(t, err)
	}
	want := []string{"MariaDB write", "mariadb-binlog", "decoder", "decoder / mariadb-binlog", "end to end into DuckDB",
		"end to end / MariaDB write", "end to end CPU", "end to end peak RSS"}
	if len(figs) != len(want) {
		t.Fatalf("%d figures, want %d: %+v", len(figs), len(want), figs)
	}
	for i, f := range figs {
		if f.Name != want[i] || !(f.Value > 0) {
			t.Errorf("figure %d: %+v, want %s > 0", i, f, want[i])
		}
	}
	if versions["MariaDB"] == "" {
		t.Errorf("no MariaDB version recorded: %v", versions)
	}
}

func TestMergeKeepsScenariosNotRunAgain(t *testing.T) {
	dir := t.TempDir()
	old := Report{Machine: Machine{Versions: map[string]string{"Kafka": "4.4.0", "PostgreSQL": "15"}}, Scenarios: []ScenarioResult{
		{Name: "a", Stats: []Stat{{Name: "x", Median: 1}}}, {Name: "b", Stats: []Stat{{Name: "y", Median: 2}}}}}
	if _, err := old.Write(dir); err != nil {
		t.Fatal(err)
	}
	now := Report{Machine: Machine{Versions: map[string]string{"PostgreSQL": "16"}}, Scenarios: []ScenarioResult{
		{Name: "b", Stats: []Stat{{Name: "y", Median: 3}}}}}
	if err := now.Merge(filepath.Join(dir, "latest.json")); err != nil {
		t.Fatal(err)
	}
	if len(now.Scenarios) != 2 || now.Scenarios[0].Stats[0].Median != 3 || now.Scenarios[1].Name != "a" {
		t.Fatalf("merged scenarios: %+v", now.Scenarios)
	}
	if v := now.Machine.Versions; v["PostgreSQL"] != "16" || v["Kafka"] != "4.4.0" {
		t.Fatalf("merged versions: %v", v)
	}
}

func TestUpdateDocsReplacesOnlyTheResults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "performance.md")
	doc := "# Method\n\ntext\n\n" + DocsBegin + "\nold table\n" + DocsEnd + "\n\n## After\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Report{Scenarios: []ScenarioResult{{Name: "pg-stream", Stats: []Stat{{Name: "sluice / pg_recvlogical", Unit: "ratio", Median: 0.7}}}}}
	if err := rep.UpdateDocs(path, "performance.png"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	got := string(b)
	for _, want := range []string{"# Method\n\ntext\n\n" + DocsBegin, "](performance.png)", "### pg-stream (0 runs)", DocsEnd + "\n\n## After\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("docs lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old table") {
		t.Errorf("old results kept:\n%s", got)
	}
	if err := os.WriteFile(path, []byte("no markers"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rep.UpdateDocs(path, "x.png"); err == nil {
		t.Fatal("no error for a file without markers")
	}
}

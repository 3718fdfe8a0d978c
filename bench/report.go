package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Figure is one measured quantity of a scenario run.
type Figure struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
	// Target, when set, is the goal for a ratio (e.g. ">= 0.6").
	Target string `json:"target,omitempty"`
}

// Scenario is one workload with its references.
type Scenario interface {
	// Name is the scenario's id, e.g. "mariadb-binlog".
	Name() string
	// Run sets the workload up in fresh servers, measures, tears down and
	// returns the figures; profile, when not empty, is the path prefix
	// for CPU and heap profiles of sluice's part.
	Run(opts RunOptions) ([]Figure, error)
}

// RunOptions tune a scenario run.
type RunOptions struct {
	// Rows scales the workload: the number of inserted rows (updates and
	// deletes follow from it). 0 takes the scenario's default.
	Rows int
	// Duration is how long a latency scenario offers each load; 0 takes
	// 20s. The first 2s are warm-up.
	Duration time.Duration
	Profile  string
	Log      func(format string, args ...any)
	// Versions collects the versions of the servers and tools a scenario
	// ran, for the report's machine description.
	Versions map[string]string
}

// Stat is a figure over repeated runs.
type Stat struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit"`
	Target string    `json:"target,omitempty"`
	Runs   []float64 `json:"runs"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

// ScenarioResult is a scenario's figures over every run.
type ScenarioResult struct {
	Name  string `json:"name"`
	Stats []Stat `json:"stats"`
	// Error is why a run failed; the stats hold the runs before it.
	Error string `json:"error,omitempty"`
}

// Report is the output of one `make bench`.
type Report struct {
	Time      time.Time        `json:"time"`
	Machine   Machine          `json:"machine"`
	Scenarios []ScenarioResult `json:"scenarios"`
}

// Add folds one run's figures into the scenario's stats.
func (r *ScenarioResult) Add(figs []Figure) {
	for _, f := range figs {
		i := slices.IndexFunc(r.Stats, func(s Stat) bool { return s.Name == f.Name })
		if i < 0 {
			r.Stats = append(r.Stats, Stat{Name: f.Name, Unit: f.Unit, Target: f.Target})
			i = len(r.Stats) - 1
		}
		s := &r.Stats[i]
		s.Runs = append(s.Runs, f.Value)
		sorted := slices.Clone(s.Runs)
		slices.Sort(sorted)
		s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
		if n := len(sorted); n%2 == 1 {
			s.Median = sorted[n/2]
		} else {
			s.Median = (sorted[n/2-1] + sorted[n/2]) / 2
		}
	}
}

// Machine describes where a report was measured.
type Machine struct {
	CPUs     int               `json:"cpus"`
	CPUModel string            `json:"cpu_model"`
	MemBytes int64             `json:"mem_bytes"`
	OS       string            `json:"os"`
	Go       string            `json:"go"`
	Versions map[string]string `json:"versions,omitempty"` // servers and tools, as the scenarios found them
}

// DescribeMachine reads the machine's description from /proc.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), Versions: map[string]string{}}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemBytes = kb * 1024
			}
		}
	}
	return m
}

// Markdown renders the report as a table per scenario: the median of each
// figure with the min–max range over the runs.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %d CPUs (%s), %.0f GiB, %s, %s.\n", r.Time.UTC().Format("2006-01-02 15:04 MST"),
		r.Machine.CPUs, r.Machine.CPUModel, float64(r.Machine.MemBytes)/(1<<30), r.Machine.OS, r.Machine.Go)
	if len(r.Machine.Versions) > 0 {
		keys := make([]string, 0, len(r.Machine.Versions))
		for k := range r.Machine.Versions {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var vs []string
		for _, k := range keys {
			vs = append(vs, k+" "+r.Machine.Versions[k])
		}
		fmt.Fprintf(&b, "Versions: %s.\n", strings.Join(vs, "; "))
	}
	for _, s := range r.Scenarios {
		n := 0
		for _, st := range s.Stats {
			n = max(n, len(st.Runs))
		}
		fmt.Fprintf(&b, "\n### %s (%d runs)\n\n", s.Name, n)
		if s.Error != "" {
			fmt.Fprintf(&b, "**Failed:** %s\n\n", strings.ReplaceAll(s.Error, "\n", " "))
		}
		b.WriteString("| figure | median | min–max | target |\n| --- | ---: | ---: | --- |\n")
		for _, st := range s.Stats {
			fmt.Fprintf(&b, "| %s (%s) | %s | %s–%s | %s |\n", st.Name, st.Unit, num(st.Median), num(st.Min), num(st.Max), st.Target)
		}
	}
	return b.String()
}

func num(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// Write stores the report as <dir>/<stamp>.json and .md, and as
// latest.json and latest.md.
func (r *Report) Write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	stamp := r.Time.UTC().Format("20060102-150405")
	md := []byte(r.Markdown())
	for name, data := range map[string][]byte{stamp + ".json": js, stamp + ".md": md, "latest.json": js, "latest.md": md} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, stamp+".md"), nil
}

func (o RunOptions) version(name, v string) {
	if o.Versions != nil {
		o.Versions[name] = v
	}
}

// The markers around the generated part of docs/performance.md.
const (
	DocsBegin = "<!-- results: generated by sluice-bench -docs; edits between the markers are overwritten -->"
	DocsEnd   = "<!-- end of results -->"
)

// UpdateDocs replaces the text between DocsBegin and DocsEnd in the
// markdown file path with the report's table and the chart image (a path
// relative to the file).
func (r *Report) UpdateDocs(path, chart string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(b)
	i, j := strings.Index(doc, DocsBegin), strings.Index(doc, DocsEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q … %q section", path, DocsBegin, DocsEnd)
	}
	body := fmt.Sprintf("%s\n\n![Ratios to the references and throughput per scenario](%s)\n\n%s\n", DocsBegin, chart, r.Markdown())
	return os.WriteFile(path, []byte(doc[:i]+body+doc[j:]), 0o644)
}

// Merge adds the scenarios of the report in the JSON file path that r
// does not have (a scenario run now replaces its earlier figures), and
// the versions r did not record.
func (r *Report) Merge(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var old Report
	if err := json.Unmarshal(b, &old); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, s := range old.Scenarios {
		if !slices.ContainsFunc(r.Scenarios, func(x ScenarioResult) bool { return x.Name == s.Name }) {
			r.Scenarios = append(r.Scenarios, s)
		}
	}
	if r.Machine.Versions == nil {
		r.Machine.Versions = map[string]string{}
	}
	for k, v := range old.Machine.Versions {
		if _, ok := r.Machine.Versions[k]; !ok {
			r.Machine.Versions[k] = v
		}
	}
	return nil
}

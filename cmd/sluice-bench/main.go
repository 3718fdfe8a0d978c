// Command sluice-bench runs the benchmark scenarios of package bench and
// writes their report (JSON and a markdown table) to a results directory:
//
//	sluice-bench [-scenario NAME,…] [-runs 3] [-rows N] [-out bench/results] [-profile DIR]
//
// Each scenario runs -runs times; the table shows each figure's median and
// min–max. -profile writes CPU and heap profiles and an execution trace of
// sluice's phases per scenario and run.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/bench"
)

var scenarios = []bench.Scenario{
	bench.PGStream{}, bench.PGStream{Toast: true}, bench.PGSnapshot{}, bench.PGIncremental{}, bench.PGLatency{},
	bench.MariaDBKafka{}, bench.MariaDBSnapshot{}, bench.MariaDBIncremental{}, bench.MariaDBLatency{},
	bench.MariaDBBinlog{}, bench.MariaDBBinlog{Bulk: true}, bench.PGBacklogSinks{}, bench.PGBacklogSinks{Toast: true},
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	only := flag.String("scenario", "", "comma-separated scenarios to run (default all: "+names()+")")
	runs := flag.Int("runs", 3, "runs per scenario; figures are medians with min–max")
	duration := flag.Duration("duration", 0, "how long latency scenarios offer each load (0: 20s)")
	rows := flag.Int("rows", 0, "workload size (inserted rows); 0 takes each scenario's default")
	out := flag.String("out", "bench/results", "directory for the JSON and markdown report")
	profile := flag.String("profile", "", "directory for CPU and heap profiles (none when empty)")
	merge := flag.String("merge", "", "an earlier report (JSON) whose scenarios not run now are kept in this one")
	docs := flag.String("docs", "", "a markdown file whose results section (between the markers "+bench.DocsBegin+" and "+bench.DocsEnd+") takes the report, with the chart beside it")
	flag.Parse()
	if *runs < 1 {
		return errors.New("-runs must be at least 1")
	}
	var chosen []bench.Scenario
	for _, s := range scenarios {
		if *only == "" || contains(strings.Split(*only, ","), s.Name()) {
			chosen = append(chosen, s)
		}
	}
	if len(chosen) == 0 {
		return fmt.Errorf("no scenario named %q (have %s)", *only, names())
	}
	if *profile != "" {
		if err := os.MkdirAll(*profile, 0o755); err != nil {
			return err
		}
	}
	rep := bench.Report{Time: time.Now(), Machine: bench.DescribeMachine()}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	failed := 0
	for _, s := range chosen {
		res := bench.ScenarioResult{Name: s.Name()}
		for i := 1; i <= *runs; i++ {
			logf("== %s, run %d of %d", s.Name(), i, *runs)
			o := bench.RunOptions{Rows: *rows, Duration: *duration, Log: logf, Versions: rep.Machine.Versions}
			if *profile != "" {
				o.Profile = filepath.Join(*profile, fmt.Sprintf("%s-run%d-", s.Name(), i))
			}
			figs, err := s.Run(o)
			if err != nil {
				// The other scenarios still run; the report says what failed.
				res.Error = fmt.Sprintf("run %d: %v", i, err)
				failed++
				logf("%s run %d failed: %v", s.Name(), i, err)
				break
			}
			res.Add(figs)
		}
		rep.Scenarios = append(rep.Scenarios, res)
	}
	if *merge != "" {
		if err := rep.Merge(*merge); err != nil {
			return err
		}
	}
	path, err := rep.Write(*out)
	if err != nil {
		return err
	}
	chart := strings.TrimSuffix(path, ".md") + ".png"
	if err := rep.Chart(chart); err != nil {
		return err
	}
	if err := copyFile(chart, filepath.Join(*out, "latest.png")); err != nil {
		return err
	}
	if *docs != "" {
		png := strings.TrimSuffix(*docs, filepath.Ext(*docs)) + ".png"
		if err := copyFile(chart, png); err != nil {
			return err
		}
		if err := rep.UpdateDocs(*docs, filepath.Base(png)); err != nil {
			return err
		}
		logf("updated %s and %s", *docs, png)
	}
	fmt.Print(rep.Markdown())
	logf("report: %s", path)
	if failed > 0 {
		return fmt.Errorf("%d of %d scenarios failed (see the report)", failed, len(chosen))
	}
	return nil
}

func names() string {
	var n []string
	for _, s := range scenarios {
		n = append(n, s.Name())
	}
	return strings.Join(n, ", ")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

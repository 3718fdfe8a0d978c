package bench

import (
	"flag"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// go test -run TestChart -chart.out=/tmp/chart.png ./bench/ keeps a copy
// of the fixture's chart to look at.
var chartOut = flag.String("chart.out", "", "also write the fixture report's chart to this PNG")

// Fixtures: synthetic figures shaped like the scenarios' output, not
// measurements.
func fixtureStat(name, unit, target string, runs ...float64) Stat {
	var r ScenarioResult
	for _, v := range runs {
		r.Add([]Figure{{Name: name, Unit: unit, Value: v, Target: target}})
	}
	return r.Stats[0]
}

func fixtureMachine() Machine {
	return Machine{CPUs: 16, CPUModel: "Fixture CPU @ 3.00GHz", MemBytes: 64 << 30, OS: "linux/amd64", Go: "go1.26.0"}
}

func fixtureReport() *Report {
	return &Report{
		Time:    time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC),
		Machine: fixtureMachine(),
		Scenarios: []ScenarioResult{
			{Name: "mariadb-binlog", Stats: []Stat{
				fixtureStat("MariaDB write", "rows/s", "", 61000, 64000, 59500),
				fixtureStat("mariadb-binlog", "rows/s", "", 410000, 432000, 398000),
				fixtureStat("decoder", "rows/s", "", 905000, 951000, 880000),
				fixtureStat("decoder / mariadb-binlog", "ratio", ">= 0.6", 2.2, 2.21, 2.2),
				fixtureStat("end to end into DuckDB", "rows/s", "", 120000, 131000, 118000),
				fixtureStat("end to end / MariaDB write", "ratio", ">= 1.0", 1.97, 2.05, 1.9),
			}},
			{Name: "postgres-kafka", Stats: []Stat{
				fixtureStat("pg_recvlogical", "rows/s", "", 520000, 540000, 505000),
				fixtureStat("sluice → Kafka", "rows/s", "", 180000, 195000, 171000),
				fixtureStat("Debezium → Kafka", "rows/s", "", 95000, 101000, 88000),
				fixtureStat("Kafka ceiling", "rows/s", "", 2.4e6, 2.5e6, 2.3e6),
				fixtureStat("sluice → Kafka / Debezium → Kafka", "ratio", ">= 1.5", 1.89, 1.93, 1.94),
				fixtureStat("sluice → Kafka / pg_recvlogical", "ratio", ">= 0.5", 0.35, 0.36, 0.34),
				fixtureStat("p99 latency", "ms", "", 41, 45, 39),
				fixtureStat("RSS", "MiB", "", 84, 90, 81),
			}},
			{Name: "postgres-snapshot", Stats: []Stat{
				fixtureStat("COPY TO STDOUT", "rows/s", "", 1.6e6, 1.7e6, 1.55e6),
				fixtureStat("sluice snapshot", "rows/s", "", 1.1e6, 1.15e6, 1.02e6),
				fixtureStat("sluice snapshot / COPY TO STDOUT", "ratio", ">= 0.5", 0.69, 0.7, 0.66),
				fixtureStat("CPU", "s per 1M rows", "", 1.9, 2.1, 1.8),
				fixtureStat("recovery", "s", "< 5", 2.1, 2.4, 2.0),
			}},
		},
	}
}

// checkChartPNG decodes the chart and checks its size and that it holds
// more than a blank page.
func checkChartPNG(t *testing.T, path string, wantH int) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != chartWidthPx || b.Dy() != wantH {
		t.Fatalf("chart is %dx%d, want %dx%d", b.Dx(), b.Dy(), chartWidthPx, wantH)
	}
	colours := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}] = true
		}
	}
	if len(colours) < 8 {
		t.Fatalf("chart has %d colours, looks blank", len(colours))
	}
	return img
}

func TestChart(t *testing.T) {
	r := fixtureReport()
	ratios, rates := r.chartRows()
	if len(ratios) != 5 || len(rates) != 10 {
		t.Fatalf("got %d ratio and %d rows/s bars, want 5 and 10", len(ratios), len(rates))
	}
	wantColour := map[string]any{
		"mariadb-binlog: decoder":                             colSluice,
		"mariadb-binlog: end to end into DuckDB":              colSluice,
		"mariadb-binlog: mariadb-binlog":                      colReference,
		"mariadb-binlog: MariaDB write":                       colReference,
		"postgres-kafka: Debezium → Kafka":                    colReference,
		"postgres-kafka: sluice → Kafka":                      colSluice,
		"postgres-kafka: sluice → Kafka / pg_recvlogical":     colMisses,
		"mariadb-binlog: end to end / MariaDB write":          colMeets,
		"postgres-snapshot: sluice snapshot / COPY TO STDOUT": colMeets,
	}
	for _, row := range append(ratios, rates...) {
		if want, ok := wantColour[row.label]; ok && row.color != want {
			t.Errorf("%s: colour %v, want %v", row.label, row.color, want)
		}
	}

	path := filepath.Join(t.TempDir(), "chart.png")
	if err := r.Chart(path); err != nil {
		t.Fatal(err)
	}
	checkChartPNG(t, path, chartMinHeightPx)
	if *chartOut != "" {
		if err := r.Chart(*chartOut); err != nil {
			t.Fatal(err)
		}
	}
}

func TestChartNoRatios(t *testing.T) {
	r := &Report{Time: time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC), Machine: fixtureMachine(), Scenarios: []ScenarioResult{
		{Name: "fixture", Stats: []Stat{
			fixtureStat("mariadb-binlog", "rows/s", "", 400000, 420000),
			fixtureStat("decoder", "rows/s", "", 900000, 950000),
			fixtureStat("RSS", "MiB", "", 80, 82),
		}},
	}}
	path := filepath.Join(t.TempDir(), "chart.png")
	if err := r.Chart(path); err != nil {
		t.Fatal(err)
	}
	checkChartPNG(t, path, chartMinHeightPx)

	// Nothing to draw at all still gives a valid image with the notes.
	empty := &Report{}
	if err := empty.Chart(path); err != nil {
		t.Fatal(err)
	}
	checkChartPNG(t, path, chartMinHeightPx)
}

func TestChartTall(t *testing.T) {
	// Many figures make the image taller rather than cramming the bars.
	r := &Report{Machine: fixtureMachine()}
	for i := range 12 {
		r.Scenarios = append(r.Scenarios, ScenarioResult{Name: "fixture-" + string(rune('a'+i)), Stats: []Stat{
			fixtureStat("a", "rows/s", "", 1000, 2000),
			fixtureStat("b", "rows/s", "", 3000, 4000),
			fixtureStat("b / a", "ratio", ">= 1", 1.5, 2),
		}})
	}
	path := filepath.Join(t.TempDir(), "chart.png")
	if err := r.Chart(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Width != chartWidthPx || cfg.Height <= chartMinHeightPx {
		t.Fatalf("chart is %dx%d, want %d wide and taller than %d", cfg.Width, cfg.Height, chartWidthPx, chartMinHeightPx)
	}
}

func TestParseTarget(t *testing.T) {
	for _, c := range []struct {
		in string
		op string
		x  float64
		ok bool
	}{
		{">= 0.6", ">=", 0.6, true},
		{">=1", ">=", 1, true},
		{"< 5", "<", 5, true},
		{"<= 2.5", "<=", 2.5, true},
		{"", "", 0, false},
		{"about 2", "", 0, false},
		{">= x", "", 0, false},
	} {
		op, x, ok := parseTarget(c.in)
		if op != c.op || x != c.x || ok != c.ok {
			t.Errorf("parseTarget(%q) = %q, %v, %v; want %q, %v, %v", c.in, op, x, ok, c.op, c.x, c.ok)
		}
	}
	if got := si(1234567); got != "1.23M" {
		t.Errorf("si(1234567) = %q", got)
	}
	if got := si(999700); got != "1M" {
		t.Errorf("si(999700) = %q", got)
	}
}

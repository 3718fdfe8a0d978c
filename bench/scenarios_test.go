package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// Each scenario runs end to end on a small workload (its speed is what
// `make bench` measures, not these tests): the scenario itself checks that
// every change reached its topic exactly once (or, after the kill, at
// least once), and the test that it reports every figure with a value.

func runScenario(t *testing.T, s Scenario, o RunOptions, want []string) map[string]Figure {
	t.Helper()
	harness.SkipShort(t, "starts the servers and runs the scenario")
	o.Log, o.Versions = t.Logf, map[string]string{}
	figs, err := s.Run(o)
	if err != nil {
		harness.SkipOrFail(t, err)
	}
	got := map[string]Figure{}
	var names []string
	for _, f := range figs {
		got[f.Name] = f
		names = append(names, f.Name)
		if !(f.Value > 0) {
			t.Errorf("%s: %s = %v, want > 0", s.Name(), f.Name, f.Value)
		}
	}
	for _, w := range want {
		if !slices.Contains(names, w) {
			t.Errorf("%s: no figure %q (have %q)", s.Name(), w, names)
		}
	}
	if len(o.Versions) == 0 {
		t.Errorf("%s: no versions recorded", s.Name())
	}
	return got
}

func TestPGStreamScenario(t *testing.T) {
	runScenario(t, PGStream{}, RunOptions{Rows: 5000}, []string{"pg_recvlogical", "sluice → Kafka", "Kafka ceiling",
		"Debezium → Kafka (JSON)", "sluice / pg_recvlogical", "sluice / Debezium", "sluice peak RSS, whole backlog waiting"})
}

func TestPGSnapshotScenario(t *testing.T) {
	runScenario(t, PGSnapshot{}, RunOptions{Rows: 20000}, []string{"COPY TO STDOUT", "sluice snapshot → Kafka",
		"Debezium snapshot → Kafka (JSON)", "sluice / COPY"})
}

func TestPGLatencyScenario(t *testing.T) {
	figs := runScenario(t, PGLatency{}, RunOptions{Duration: 3 * time.Second}, []string{"p50 at 5k rows/s",
		"p99 at 5k rows/s", "p99 at 20k rows/s", "canary p99 at 5k rows/s", "recovery after kill -9 at 5k rows/s"})
	if p50, p99 := figs["p50 at 5k rows/s"].Value, figs["p99 at 5k rows/s"].Value; p50 > p99 {
		t.Errorf("p50 %.1f ms above p99 %.1f ms", p50, p99)
	}
}

func TestMariaDBKafkaScenario(t *testing.T) {
	runScenario(t, MariaDBKafka{}, RunOptions{Rows: 5000}, []string{"mariadb-binlog", "sluice → Kafka", "Kafka ceiling",
		"Debezium → Kafka (JSON)", "sluice / mariadb-binlog", "sluice / Debezium"})
}

func TestMariaDBSnapshotScenario(t *testing.T) {
	runScenario(t, MariaDBSnapshot{}, RunOptions{Rows: 20000}, []string{"mariadb SELECT *", "sluice snapshot → Kafka",
		"Debezium snapshot → Kafka (JSON)", "sluice / mariadb SELECT"})
}

func TestMariaDBLatencyScenario(t *testing.T) {
	runScenario(t, MariaDBLatency{}, RunOptions{Duration: 3 * time.Second}, []string{"p99 at 5k rows/s", "p99 at 20k rows/s",
		"recovery after kill -9 at 5k rows/s"})
}

package bench

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync"

	"github.com/sluice-cdc/sluice/config"
	sluicedaemon "github.com/sluice-cdc/sluice/daemon"
)

// defaultConfig is a pipeline as a user writes it, every setting at its
// default; only what the daemon derives from the settings is read.
const defaultConfig = `pipeline: bench
source:
  postgres:
    dsn: postgres://sluice@127.0.0.1:5432/bench
    tables: [public.bench_rows]
sinks:
  - kafka:
      name: events
      brokers: ["127.0.0.1:9092"]
      registry:
        url: http://127.0.0.1:8081
`

// daemonMemoryLimit is the Go soft memory limit the daemon sets with
// default settings (sluicedaemon.MemoryLimit). The in-process phases run under
// it, so their figures are what a user of the daemon gets: a limit below
// what a phase keeps live makes the garbage collector run without end,
// and without one the heap grows to twice what is live.
var daemonMemoryLimit = sync.OnceValues(func() (int64, error) {
	cfg, err := config.Parse("bench.yaml", []byte(defaultConfig), func(string) (string, bool) { return "", false })
	if err != nil {
		return 0, fmt.Errorf("bench: the default pipeline config: %w", err)
	}
	return sluicedaemon.MemoryLimit(cfg), nil
})

// underDaemonLimit runs f with the daemon's memory limit set, and the
// collector's GOGC the daemon sets under it (sluicedaemon.GCPercent)
// unless GOGC is in the environment, restoring the process's own
// afterwards.
func underDaemonLimit(f func() error) error {
	limit, err := daemonMemoryLimit()
	if err != nil {
		return err
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(sluicedaemon.GCPercent))
	}
	return f()
}

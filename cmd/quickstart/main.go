// Command quickstart starts a throwaway local PostgreSQL (installing the
// Debian package when it is missing) with sample tables and a small write
// workload, and captures it with sluice into an embedded DuckDB file and an
// embedded search index.
//
//	go run ./cmd/quickstart            # until Ctrl-C
//	go run ./cmd/quickstart --for 30s  # a bounded run that verifies the copy
//
// Watch it with `go run ./cmd/sluice status` in another terminal.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-cdc/sluice/obs"
)

func main() {
	var o options
	flag.DurationVar(&o.For, "for", 0, "run the workload this long, then verify the copy and exit (0: until Ctrl-C)")
	flag.StringVar(&o.Dir, "dir", ".quickstart", "directory for the config, the DuckDB file and the checkpoints")
	flag.StringVar(&o.Listen, "http-listen", "127.0.0.1:9090", "address of /metrics, /status (what `sluice status` reads)")
	flag.IntVar(&o.Rate, "rate", 50, "workload transactions per second")
	flag.Parse()

	log, err := obs.NewLogger("info", "console", os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	o.Log = log
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "stopping: the workload stops, sluice catches up and drains (Ctrl-C again to exit at once)")
		cancel()
		<-sigs
		os.Exit(130)
	}()
	res, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", obs.Redact(err.Error()))
		os.Exit(1)
	}
	fmt.Println(res.summary())
	if !res.Equal {
		os.Exit(1)
	}
	_ = time.Second
}

// Command sluice is the change-data-capture daemon: `sluice run -c FILE`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/obs"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return daemon.ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.code != daemon.ExitOK {
			fmt.Fprintln(stderr, obs.Redact(ee.err.Error()))
		}
		return ee.code
	}
	// Usage errors (unknown flags, missing arguments).
	fmt.Fprintln(stderr, "sluice:", err)
	return daemon.ExitConfig
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Change-data-capture from Postgres and MySQL into idempotent sinks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(runCmd(stderr), validateCmd(stdout), statusCmd(stdout), searchCmd(stdout), verifyCmd(stdout, stderr), snapshotCmd(stdout), versionCmd(stdout))
	return root
}

func loadConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, &exitError{code: daemon.ExitConfig, err: err}
	}
	return cfg, nil
}

func runCmd(stderr io.Writer) *cobra.Command {
	var (
		file      string
		logFormat string
		flags     daemon.RunFlags
	)
	c := &cobra.Command{
		Use:   "run -c FILE",
		Short: "Run the pipeline described by FILE until SIGINT/SIGTERM",
		Long: `Run the pipeline. The first SIGINT/SIGTERM stops reading, drains what is in
flight within runtime.shutdown_timeout, commits a final checkpoint and exits 0.
A second signal exits at once with code 130; nothing past what is durable is
ever checkpointed, so a restart resumes without loss.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			if logFormat != "" {
				if logFormat != "json" && logFormat != "console" {
					return &exitError{code: daemon.ExitConfig, err: fmt.Errorf("--log-format %q: want json or console", logFormat)}
				}
				cfg.Log.Format = logFormat
			}
			if flags.ResetOffsets && flags.FromPreviousCheckpoint {
				return &exitError{code: daemon.ExitConfig, err: errors.New("--reset-offsets and --from-previous-checkpoint exclude each other")}
			}
			daemon.RegisterSecrets(cfg)
			log, err := obs.NewLogger(cfg.Log.Level, cfg.Log.Format, stderr)
			if err != nil {
				return &exitError{code: daemon.ExitConfig, err: err}
			}
			defer log.Sync() //nolint:errcheck

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			go handleSignals(sigs, cancel, func(code int) { _ = log.Sync(); os.Exit(code) }, log.Sugar().Infof)
			if err := daemon.Run(ctx, cfg, flags, log); err != nil {
				return &exitError{code: daemon.ExitCode(err), err: err}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&file, "config", "c", "", "pipeline config file (required)")
	_ = c.MarkFlagRequired("config")
	c.Flags().StringVar(&logFormat, "log-format", "", "json (default) or console; overrides log.format")
	c.Flags().BoolVar(&flags.ResetOffsets, "reset-offsets", false, "move the stored checkpoint aside and start over with a fresh snapshot")
	c.Flags().BoolVar(&flags.FromPreviousCheckpoint, "from-previous-checkpoint", false, "resume from the checkpoint before the newest (after a corrupt checkpoint was reported)")
	c.Flags().BoolVar(&flags.DropSlotOnExit, "drop-slot-on-exit", false, "drop the Postgres replication slot at exit (throwaway runs)")
	c.Flags().StringVar(&flags.HTTPListen, "http-listen", "", "override http.listen (host:port)")
	return c
}

// handleSignals cancels the run on the first signal (graceful drain) and
// exits with 130 on the second. Exiting then loses nothing: the checkpoint
// only ever names durable records, so the restart re-reads the rest.
func handleSignals(sigs <-chan os.Signal, cancel func(), exit func(int), logf func(string, ...any)) {
	s := <-sigs
	logf("received %s: draining (send it again to exit at once)", s)
	cancel()
	s = <-sigs
	logf("received %s again: exiting without draining", s)
	exit(daemon.ExitInterrupted)
}

func validateCmd(stdout io.Writer) *cobra.Command {
	var file string
	c := &cobra.Command{
		Use:   "validate -c FILE",
		Short: "Check a config file without touching any database",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: ok (pipeline %s, source %s, %d sink(s))\n", file, cfg.Pipeline, cfg.Source.Kind(), len(cfg.Sinks))
			return nil
		},
	}
	c.Flags().StringVarP(&file, "config", "c", "", "pipeline config file (required)")
	_ = c.MarkFlagRequired("config")
	return c
}

func statusCmd(stdout io.Writer) *cobra.Command {
	var (
		addr   string
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "status [--addr HOST:PORT]",
		Short: "Show a running daemon's snapshot progress, lag, checkpoint age and DLQ depth",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: 5 * time.Second}
			resp, err := client.Get("http://" + addr + "/status")
			if err != nil {
				return &exitError{code: daemon.ExitFailure, err: fmt.Errorf("status: %w (is `sluice run` serving on %s? see http.listen)", err, addr)}
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return &exitError{code: daemon.ExitFailure, err: err}
			}
			if resp.StatusCode != http.StatusOK {
				return &exitError{code: daemon.ExitFailure, err: fmt.Errorf("status: %s: %s", resp.Status, body)}
			}
			if asJSON {
				_, err = stdout.Write(append(body, '\n'))
				return err
			}
			var r obs.StatusReport
			if err := json.Unmarshal(body, &r); err != nil {
				return &exitError{code: daemon.ExitFailure, err: fmt.Errorf("status: bad response: %w", err)}
			}
			obs.RenderStatus(stdout, r)
			return nil
		},
	}
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:9090", "the daemon's http.listen address")
	c.Flags().BoolVar(&asJSON, "json", false, "print the raw JSON")
	return c
}

func versionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			v := version
			if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
				v = bi.Main.Version
			}
			fmt.Fprintf(stdout, "sluice %s\n", v)
		},
	}
}

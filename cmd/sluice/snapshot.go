package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/daemon"
)

// snapshotCmd asks a running daemon to re-snapshot one table while it
// keeps streaming.
func snapshotCmd(stdout io.Writer) *cobra.Command {
	var (
		file, addr string
		req        daemon.SnapshotRequest
	)
	c := &cobra.Command{
		Use:   "snapshot -c FILE --table SCHEMA.TABLE [--where SQL]",
		Short: "Re-snapshot one table (or the rows a condition selects) while the pipeline streams",
		Long: `Queue an incremental snapshot of one captured table in the running daemon
of FILE (its http.listen address, or --addr). The table is read in key-ordered
chunks between watermarks while the stream keeps flowing; progress shows in
` + "`sluice status`" + ` and survives restarts. --where limits it to the rows a SQL
condition selects (for instance after a sink lost some of them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := daemonAddr(file, addr)
			if err != nil {
				return err
			}
			acc, err := postSnapshot(addr, req)
			if err != nil {
				return &exitError{code: daemon.ExitFailure, err: err}
			}
			fmt.Fprintf(stdout, "snapshot of %s queued (run %s); follow it with `sluice status --addr %s`\n", req.Table, acc.Run, addr)
			return nil
		},
	}
	c.Flags().StringVarP(&file, "config", "c", "", "pipeline config file (for http.listen)")
	c.Flags().StringVar(&addr, "addr", "", "the daemon's address (default: http.listen of the config)")
	c.Flags().StringVar(&req.Table, "table", "", "the table, schema.table (required)")
	c.Flags().StringVar(&req.Where, "where", "", "only the rows this SQL condition selects")
	_ = c.MarkFlagRequired("table")
	return c
}

// postSnapshot sends req to the daemon serving on addr.
func postSnapshot(addr string, req daemon.SnapshotRequest) (daemon.SnapshotAccepted, error) {
	var acc daemon.SnapshotAccepted
	body, err := json.Marshal(req)
	if err != nil {
		return acc, err
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Post("http://"+addr+daemon.SnapshotPath, "application/json", bytes.NewReader(body))
	if err != nil {
		return acc, fmt.Errorf("snapshot: %w (is `sluice run` serving on %s? see http.listen)", err, addr)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusAccepted {
		return acc, fmt.Errorf("snapshot of %s refused: %s: %s", req.Table, resp.Status, bytes.TrimSpace(out))
	}
	if err := json.Unmarshal(out, &acc); err != nil {
		return acc, fmt.Errorf("snapshot: bad response %q: %w", out, err)
	}
	return acc, nil
}

// daemonAddr is addr, or the http.listen address of the config file.
func daemonAddr(file, addr string) (string, error) {
	if addr != "" {
		return addr, nil
	}
	cfg, err := loadConfig(file)
	if err != nil {
		return "", err
	}
	if cfg.HTTP.Listen == "" {
		return "", &exitError{code: daemon.ExitConfig, err: fmt.Errorf("%s sets no http.listen: pass the daemon's address with --addr", file)}
	}
	if strings.HasSuffix(cfg.HTTP.Listen, ":0") {
		return "", &exitError{code: daemon.ExitConfig, err: fmt.Errorf("%s listens on a random port (http.listen %s): pass the daemon's address with --addr", file, cfg.HTTP.Listen)}
	}
	return cfg.HTTP.Listen, nil
}

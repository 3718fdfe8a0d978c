package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/obs"
	"github.com/sluice-cdc/sluice/pipeline/textform"
	"github.com/sluice-cdc/sluice/verify"
)

// Exit codes of `sluice verify` (documented in the README).
const (
	verifyEqual     = 0
	verifyDifferent = 1
	verifyFailed    = 2
)

func verifyCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		file   string
		tables []string
		sink   string
		asJSON bool
		settle time.Duration
		repair bool
		addr   string
	)
	c := &cobra.Command{
		Use:   "verify -c FILE [--table T] [--sink NAME] [--json] [--repair [--addr HOST:PORT]]",
		Short: "Compare every captured table with every sink that mirrors it",
		Long: `Compare every captured table with every sink that mirrors it, key by key
where their sums differ. With --repair the running daemon of FILE (its
http.listen address, or --addr) then reads every differing key again while it
streams: rows are written again, and a key with no row in the source is
deleted from the sinks. Run verify again once ` + "`sluice status`" + ` shows the
repairs done.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return &exitError{code: verifyFailed, err: err}
			}
			ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			flags := daemon.VerifyFlags{Tables: tables, Sink: sink, Settle: settle}
			if f, ok := stderr.(*os.File); ok && !asJSON && isTerminal(f) {
				flags.Progress = func(done, total int, r verify.Result) {
					filled := done * 20 / max(total, 1)
					fmt.Fprintf(stderr, "\r[%s%s] %d/%d %s → %s\x1b[K", strings.Repeat("#", filled), strings.Repeat("-", 20-filled),
						done, total, r.Table, r.Sink)
					if done == total {
						fmt.Fprintln(stderr)
					}
				}
			}
			rep, err := daemon.Verify(ctx, cfg, flags, zap.NewNop())
			if err != nil {
				return &exitError{code: verifyFailed, err: fmt.Errorf("verify: %w", err)}
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				_ = enc.Encode(struct {
					verify.Report
					Outcome string `json:"outcome"`
				}{rep, outcomeText(rep.Outcome())})
			} else {
				renderVerify(stdout, rep)
			}
			if repair {
				if err := queueRepairs(stdout, file, addr, rep); err != nil {
					return &exitError{code: verifyFailed, err: err}
				}
			}
			if code := rep.Outcome(); code != verifyEqual {
				return &exitError{code: code}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&file, "config", "c", "", "pipeline config file (required)")
	c.Flags().StringSliceVar(&tables, "table", nil, "compare only this captured table (schema.table; repeatable)")
	c.Flags().StringVar(&sink, "sink", "", "compare only the sink with this name")
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	c.Flags().DurationVar(&settle, "settle", 2*time.Minute, "longest wait for the pipeline's checkpoint before a recheck (a stopped pipeline: differences are reported unconfirmed)")
	c.Flags().BoolVar(&repair, "repair", false, "queue the differing keys in the running daemon, which reads them again (and deletes keys the source lacks)")
	c.Flags().StringVar(&addr, "addr", "", "with --repair, the daemon's address (default: http.listen of the config)")
	_ = c.MarkFlagRequired("config")
	return c
}

// queueRepairs asks the daemon to read every differing key of rep again,
// one request per table (keys of all its sinks together).
func queueRepairs(w io.Writer, file, addr string, rep verify.Report) error {
	type pending struct {
		keys [][]string
		seen map[string]bool
	}
	byTable := map[string]*pending{}
	var order []string
	for _, r := range rep.Results {
		if r.Differing == 0 || r.Shape == nil {
			continue
		}
		p := byTable[r.Table]
		if p == nil {
			p = &pending{seen: map[string]bool{}}
			byTable[r.Table] = p
			order = append(order, r.Table)
		}
		for _, key := range r.Keys {
			k := verify.Key(key)
			if p.seen[k] {
				continue
			}
			p.seen[k] = true
			text := make([]string, len(key))
			for i, v := range key {
				col := &r.Shape.Columns[r.Shape.KeyIdx[i]]
				s, err := textform.Encode(col, v)
				if err != nil {
					return fmt.Errorf("repair of %s: key column %s: %w", r.Table, col.Name, err)
				}
				text[i] = s
			}
			p.keys = append(p.keys, text)
		}
	}
	if len(order) == 0 {
		return nil
	}
	addr, err := daemonAddr(file, addr)
	if err != nil {
		return err
	}
	for _, table := range order {
		p := byTable[table]
		acc, err := postSnapshot(addr, daemon.SnapshotRequest{Table: table, Keys: p.keys})
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		fmt.Fprintf(w, "repair of %d key(s) of %s queued (run %s); follow it with `sluice status --addr %s`\n", len(p.keys), table, acc.Run, addr)
	}
	return nil
}

func outcomeText(code int) string {
	switch code {
	case verifyEqual:
		return "equal"
	case verifyDifferent:
		return "different"
	}
	return "could not compare"
}

// renderVerify prints the summary table, then each difference.
func renderVerify(w io.Writer, rep verify.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tSINK\tSOURCE ROWS\tSINK ROWS\tDIFFERING\tRESULT")
	for _, r := range rep.Results {
		res := "equal"
		switch {
		case r.Error != "":
			res = "not compared"
		case r.Differing > 0:
			res = "DIFFERENT"
		}
		if r.Rechecked && r.Error == "" {
			res += " (rechecked after the checkpoint caught up)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", r.Table, r.Sink, r.SourceRows, r.SinkRows, r.Differing, res)
	}
	tw.Flush()
	for _, r := range rep.Results {
		if r.Error != "" {
			fmt.Fprintf(w, "\n%s → %s: not compared: %s\n", r.Table, r.Sink, obs.Redact(r.Error))
			continue
		}
		if r.Differing == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s → %s: %d differing key(s)\n", r.Table, r.Sink, r.Differing)
		if r.Unconfirmed != "" {
			fmt.Fprintf(w, "  not rechecked, so some may be changes still on their way: %s\n", r.Unconfirmed)
		}
		for _, d := range r.Diffs {
			switch d.Kind {
			case "missing":
				fmt.Fprintf(w, "  key %s: in the source, not in the sink\n", d.Key)
			case "unexpected":
				fmt.Fprintf(w, "  key %s: in the sink, not in the source\n", d.Key)
			default:
				for _, c := range d.Columns {
					fmt.Fprintf(w, "  key %s column %s: source %s, sink %s\n", d.Key, c.Column, c.Source, c.Sink)
				}
			}
		}
		if len(r.Diffs) < r.Differing {
			fmt.Fprintf(w, "  … %d more\n", r.Differing-len(r.Diffs))
		}
	}
	fmt.Fprintf(w, "\n%s\n", outcomeText(rep.Outcome()))
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

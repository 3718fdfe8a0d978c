package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/sinks/bleve"
)

// searchCmd answers a query from a pipeline's embedded (bleve) index: from
// the running daemon over HTTP when it serves, else straight from the index
// directory.
func searchCmd(stdout io.Writer) *cobra.Command {
	var (
		file, sink, addr string
		req              bleve.SearchRequest
		asJSON           bool
	)
	c := &cobra.Command{
		Use:   "search -c FILE QUERY",
		Short: "Search the rows a pipeline keeps in its embedded (bleve) index",
		Long: "QUERY is in bleve's query-string syntax: words match any column, name:alice one column,\n" +
			"+a -b require and exclude, qty:>5 ranges, \"two words\" phrases; '*' matches every row.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(file)
			if err != nil {
				return err
			}
			target, err := pickBleve(cfg, sink)
			if err != nil {
				return &exitError{code: daemon.ExitConfig, err: err}
			}
			req.Query = strings.Join(args, " ")
			if addr == "" {
				addr = cfg.HTTP.Listen
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			res, err := searchDaemon(ctx, addr, target.Name, req)
			if errors.Is(err, errNoDaemon) {
				res, err = bleve.Search(ctx, target.Path, req)
				if errors.Is(err, bleve.ErrLocked) {
					err = fmt.Errorf("%w: a running sluice holds %s but does not answer on %q; pass its http.listen address with --addr", err, target.Path, addr)
				}
			}
			switch {
			case errors.Is(err, bleve.ErrQuery):
				return &exitError{code: daemon.ExitConfig, err: err}
			case err != nil:
				return &exitError{code: daemon.ExitFailure, err: err}
			}
			if asJSON {
				return json.NewEncoder(stdout).Encode(res)
			}
			renderHits(stdout, res)
			return nil
		},
	}
	c.Flags().StringVarP(&file, "config", "c", "", "pipeline config file (required)")
	_ = c.MarkFlagRequired("config")
	c.Flags().StringVar(&sink, "sink", "", "the bleve sink's name (needed when the pipeline has several)")
	c.Flags().StringVar(&req.Table, "table", "", "only rows of this table (schema.table)")
	c.Flags().IntVar(&req.Size, "size", bleve.DefaultSize, "number of hits")
	c.Flags().IntVar(&req.From, "from", 0, "hits to skip (paging)")
	c.Flags().StringVar(&addr, "addr", "", "the running daemon's HTTP address (default: the config's http.listen)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return c
}

// pickBleve returns the bleve sink named name, or the only one.
func pickBleve(cfg *config.Config, name string) (*config.BleveSink, error) {
	var found []*config.BleveSink
	var names []string
	for _, s := range cfg.Sinks {
		if s.Bleve != nil {
			found = append(found, s.Bleve)
			names = append(names, s.Bleve.Name)
			if s.Bleve.Name == name {
				return s.Bleve, nil
			}
		}
	}
	switch {
	case len(found) == 0:
		return nil, fmt.Errorf("%s has no bleve sink to search; add one, e.g. - bleve: {path: ./sluice.bleve}", cfg.File)
	case name != "":
		return nil, fmt.Errorf("%s has no bleve sink named %q (it has %s)", cfg.File, name, strings.Join(names, ", "))
	case len(found) > 1:
		return nil, fmt.Errorf("%s has several bleve sinks (%s); choose one with --sink", cfg.File, strings.Join(names, ", "))
	}
	return found[0], nil
}

var errNoDaemon = errors.New("no daemon answering")

// searchDaemon asks a running daemon; errNoDaemon when nothing listens.
func searchDaemon(ctx context.Context, addr, sink string, req bleve.SearchRequest) (bleve.SearchResult, error) {
	var res bleve.SearchResult
	if addr == "" {
		return res, errNoDaemon
	}
	q := url.Values{"q": {req.Query}, "sink": {sink}, "size": {strconv.Itoa(req.Size)}, "from": {strconv.Itoa(req.From)}}
	if req.Table != "" {
		q.Set("table", req.Table)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+daemon.SearchPath+"?"+q.Encode(), nil)
	if err != nil {
		return res, err
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return res, errNoDaemon
		}
		return res, fmt.Errorf("search %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return res, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		if resp.StatusCode == http.StatusBadRequest {
			return res, fmt.Errorf("%w: %s", bleve.ErrQuery, e.Error)
		}
		return res, fmt.Errorf("search %s: %s: %s", addr, resp.Status, e.Error)
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	return res, d.Decode(&res)
}

// renderHits prints one line per hit: table, key, score, then the row.
func renderHits(w io.Writer, res bleve.SearchResult) {
	fmt.Fprintf(w, "%d matching row(s), took %s\n", res.Total, res.Took.Round(time.Microsecond))
	for _, h := range res.Hits {
		key, _ := json.Marshal(h.Key)
		row, _ := json.Marshal(h.Row)
		fmt.Fprintf(w, "%s %s  score %.3f  %s\n", h.Table, key, h.Score, row)
	}
}

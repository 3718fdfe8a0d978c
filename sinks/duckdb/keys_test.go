package duckdb

import (
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/verify"
)

var (
	_ verify.KeyReader = (*Sink)(nil)
	_ verify.Scanner   = (*Sink)(nil)
)

// TestRowsByKeyDuringWrites: sinktest.KeyReadsDuringWrites on this sink.
func TestRowsByKeyDuringWrites(t *testing.T) {
	s := openSink(t, Options{})
	sinktest.KeyReadsDuringWrites(t, s, 40, func(table *pipeline.Table) map[string][]any { return rows(t, s, table) })
}

// TestRowsByKeyIndexScan checks that DuckDB answers a one-column key's
// lookup from the primary key's index, not by scanning the table.
func TestRowsByKeyIndexScan(t *testing.T) {
	s := openSink(t, Options{})
	var recs []pipeline.Record
	for id := int64(1); id <= 5000; id++ {
		recs = append(recs, change(pipeline.OpInsert, 1, id, "x", nil))
	}
	mustWrite(t, s, recs...)
	var tuples []string
	var args []any
	for id := int64(1); id <= keyGroup; id++ {
		tuple, a, ok, err := keyParams(people, []any{id * 3})
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		tuples, args = append(tuples, tuple), append(args, a...)
	}
	rows, err := s.conn.QueryContext(ctx, "EXPLAIN ANALYZE SELECT * FROM "+s.qualified(s.targetName(people.ID))+
		" WHERE "+keyCondition(people, tuples), args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var kind, text string
		if err := rows.Scan(&kind, &text); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(text)
	}
	if !strings.Contains(plan.String(), "Index Scan") {
		t.Fatalf("no index scan:\n%s", plan.String())
	}
}

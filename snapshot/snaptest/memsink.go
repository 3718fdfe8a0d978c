// Package snaptest holds test helpers for sources and the snapshot engine:
// an in-memory sink that applies records as every sink must, and a
// reader that cuts chunks at a byte bound of its own.
package snaptest

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// MemSink applies records the way every sink must (Invariant 4): by key
// and version, deletes as tombstones, truncates as versioned barriers.
type MemSink struct {
	rows     map[string]map[string]sinkRow // table → key → row
	barriers map[string]pipeline.Version
	// Records are every record applied, in order.
	Records []pipeline.Record
}

type sinkRow struct {
	ver     pipeline.Version
	vals    []any
	deleted bool
}

// NewMemSink returns an empty sink.
func NewMemSink() *MemSink {
	return &MemSink{rows: map[string]map[string]sinkRow{}, barriers: map[string]pipeline.Version{}}
}

// Apply applies recs in order.
func (m *MemSink) Apply(recs []pipeline.Record) {
	for _, r := range recs {
		m.Records = append(m.Records, r)
		if !r.Op.IsData() { // heartbeats, shapes
			continue
		}
		tbl := r.Table.ID.String()
		if m.rows[tbl] == nil {
			m.rows[tbl] = map[string]sinkRow{}
		}
		if r.Op == pipeline.OpTruncate {
			if m.barriers[tbl].Less(r.Version) {
				m.barriers[tbl] = r.Version
			}
			for k, row := range m.rows[tbl] {
				if row.ver.Less(r.Version) {
					delete(m.rows[tbl], k)
				}
			}
			continue
		}
		if !m.barriers[tbl].Less(r.Version) {
			continue
		}
		k := fmt.Sprint(r.Key())
		if cur, ok := m.rows[tbl][k]; ok && !cur.ver.Less(r.Version) {
			continue
		}
		if r.Op == pipeline.OpDelete {
			m.rows[tbl][k] = sinkRow{ver: r.Version, deleted: true}
			continue
		}
		vals := append([]any(nil), r.After...)
		if cur, ok := m.rows[tbl][k]; ok {
			for i, v := range vals {
				if v == pipeline.UnchangedValue {
					vals[i] = cur.vals[i]
				}
			}
		}
		m.rows[tbl][k] = sinkRow{ver: r.Version, vals: vals}
	}
}

// Table returns the live rows of a table as sorted strings.
func (m *MemSink) Table(name string) []string {
	var out []string
	for _, r := range m.rows[name] {
		if !r.deleted {
			out = append(out, fmt.Sprint(r.vals))
		}
	}
	sort.Strings(out)
	return out
}

// EqualRows fails t naming the rows only one side has when got and want
// differ.
func EqualRows(t testing.TB, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	// Name the rows only one side has (a row whose values differ is on both
	// lists, once with each value).
	in := func(rows []string) map[string]bool {
		m := make(map[string]bool, len(rows))
		for _, r := range rows {
			m[r] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var onlySink, onlyTable []string
	for _, r := range got {
		if !w[r] {
			onlySink = append(onlySink, r)
		}
	}
	for _, r := range want {
		if !g[r] {
			onlyTable = append(onlyTable, r)
		}
	}
	t.Fatalf("%s: sink has %d rows, table has %d\nonly in the sink:  %.1000s\nonly in the table: %.1000s", what, len(got), len(want),
		strings.Join(onlySink, " | "), strings.Join(onlyTable, " | "))
}

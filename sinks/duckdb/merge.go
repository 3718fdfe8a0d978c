package duckdb

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// mergeTable holds, inside a Write's transaction, the rows a merge is
// about to put in place of the target's.
const mergeTable = "_sluice_merge"

// mergeRows upserts the rows, version-guarded (Invariant 4), in three
// set-based steps inside the Write's transaction:
//
//  1. through a query Appender (DuckDB reads the appended rows as the
//     relation stageTable), each staged row joined with the target's row
//     of its key becomes the whole row the target is to hold — when the
//     key is new or the staged version is newer — into the temporary
//     table mergeTable, with the target's own columns;
//  2. the target's rows of those keys are deleted;
//  3. mergeTable's rows are inserted.
//
// Deleting and inserting rows instead of updating them in place (MERGE …
// UPDATE) is what keeps a stream of updates spread over a large table
// fast: DuckDB keeps per-vector undo for each updated column, so 600
// updates spread over a 1,000,000-row table took 0.5 s as an UPDATE and
// a tenth of that as a delete and an insert
// (BenchmarkWriteSpreadUpdates).
func (s *Sink) mergeRows(ctx context.Context, tb *upsert.TableBatch, rows []upsert.Row, lean bool, comp []bool, now time.Time) error {
	names, types, err := stageTypes(tb, lean, comp)
	if err != nil {
		return err
	}
	target := s.qualified(tb.Target)
	if _, err := s.conn.ExecContext(ctx, "CREATE OR REPLACE TEMP TABLE "+mergeTable+" AS SELECT * FROM "+target+" LIMIT 0"); err != nil {
		return err
	}
	// A small merge names its keys, so that DuckDB reads the target's
	// rows of them through the primary-key index.
	keys := keyList(tb, rows)
	fill, on := s.mergeQuery(tb, lean, comp, "make_timestamptz("+strconv.FormatInt(now.UnixMicro(), 10)+"::BIGINT)", keys)
	del := "DELETE FROM " + target + " AS t USING " + mergeTable + " AS m WHERE " + on
	if keys != "" {
		k := quote(tb.Cols[tb.Keys[0]].Name)
		del = "DELETE FROM " + target + " AS t WHERE t." + keys + " AND t." + k + " IN (SELECT " + k + " FROM " + mergeTable + ")"
	}
	// The query may run more than once (the Appender flushes in pieces),
	// which only appends: every key appears once in the rows.
	if err := s.appendThrough(ctx, fill, types, names, func(a *duck.Appender) error {
		return appendRows(ctx, a, len(tb.Cols), rows, lean, comp)
	}); err != nil {
		return err
	}
	for _, q := range []string{
		del,
		"INSERT INTO " + target + " BY NAME SELECT * FROM " + mergeTable,
		"DROP TABLE " + mergeTable,
	} {
		if _, err := s.conn.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// mergeQuery returns the query that fills mergeTable from the staged rows
// (step 1 of mergeRows) and the condition matching a target row t with a
// mergeTable row m by key. now is the _sluice_updated_at expression.
//
// keys, when not empty, is a condition selecting the target's rows of the
// batch's keys (keyList); the join reads only those.
func (s *Sink) mergeQuery(tb *upsert.TableBatch, lean bool, comp []bool, now, keys string) (fill, on string) {
	sel := make([]string, 0, 2*len(tb.Cols)+4)
	prefixes := []string{"c", "f"}
	if lean {
		prefixes = prefixes[:1]
	}
	for _, p := range prefixes {
		for i := range tb.Cols {
			name := p + strconv.Itoa(i)
			x := name
			if ct := typeOf(&tb.Cols[i]); ct.conv != nil {
				x = ct.conv(name) + " AS " + name
			}
			sel = append(sel, x)
			if comp[i] {
				sel = append(sel, "n"+name)
			}
		}
	}
	sel = append(sel, "v", "d")
	if !lean {
		sel = append(sel, "k", "fv")
	}
	join := make([]string, len(tb.Keys))
	match := make([]string, len(tb.Keys))
	for i, j := range tb.Keys {
		col := quote(tb.Cols[j].Name)
		join[i] = fmt.Sprintf("t.%s = s.c%d", col, j)
		match[i] = fmt.Sprintf("t.%s = m.%s", col, col)
	}
	// missing: the key is new to the target (the LEFT JOIN found no row).
	missing := "t." + quote(tb.Cols[tb.Keys[0]].Name) + " IS NULL"
	var out []string
	mine := map[string]bool{}
	for i := range tb.Cols {
		// A column and its companion (companion.go) take their values
		// from the same staged change.
		cols := [][2]string{{tb.Cols[i].Name, ""}}
		if comp[i] {
			cols = append(cols, [2]string{companionColumn(tb.Cols[i].Name), "n"})
		}
		for _, col := range cols {
			name, n := quote(col[0]), col[1]
			mine[strings.ToLower(col[0])] = true
			val := fmt.Sprintf("s.%sc%d", n, i)
			if !tb.IsKey[i] && !lean {
				// Unchanged values, columns the record's shape lacks and a
				// delete's non-key columns keep what the row holds: the
				// target's value, or an older change's of this batch when
				// that one is newer. A new key has only the latter (else
				// NULL).
				val = fmt.Sprintf("CASE WHEN %[1]s THEN (CASE WHEN s.k[%[2]d] THEN s.%[4]sf%[3]d ELSE s.%[4]sc%[3]d END) "+
					"WHEN NOT s.k[%[2]d] THEN s.%[4]sc%[3]d WHEN s.fv[%[2]d] > t.%[5]s THEN s.%[4]sf%[3]d ELSE t.%[6]s END",
					missing, i+1, i, n, quote(colVersion), name)
			}
			out = append(out, val+" AS "+name)
		}
	}
	out = append(out, "s.v AS "+quote(colVersion), "s.d AS "+quote(colDeleted), now+" AS "+quote(colUpdatedAt))
	for _, c := range []string{colVersion, colDeleted, colUpdatedAt} {
		mine[strings.ToLower(c)] = true
	}
	// Columns of the target the batch does not know (a column dropped at
	// the source stays in place) keep the row's value.
	var others []string
	for c := range s.tables[strings.ToLower(tb.Target)] {
		if !mine[c] {
			others = append(others, c)
		}
	}
	slices.Sort(others)
	for _, c := range others {
		out = append(out, "t."+quote(c)+" AS "+quote(c))
	}
	// Invariant 4: a change whose version is not newer than the stored
	// row's (live or tombstone) changes nothing, so replays are idempotent
	// and late snapshot rows cannot resurrect deleted ones.
	target := s.qualified(tb.Target)
	if keys != "" {
		target = "(SELECT * FROM " + target + " WHERE " + keys + ")"
	}
	fill = "INSERT INTO " + mergeTable + " BY NAME SELECT " + strings.Join(out, ", ") +
		" FROM (SELECT " + strings.Join(sel, ", ") + " FROM " + stageTable + ") AS s LEFT JOIN " + target +
		" AS t ON " + strings.Join(join, " AND ") + " WHERE " + missing + " OR s.v > t." + quote(colVersion)
	return fill, strings.Join(match, " AND ")
}

// inListMax is the most keys a merge names (keyList): up to it DuckDB
// reads the named keys' rows through the primary-key index (an index
// scan; its index_scan_max_count is 2,048), where a join reads the key
// and version of every row of the table — for a stream batch of 200
// updates of a 1,000,000-row table, 40 ms instead of 4 ms
// (BenchmarkWriteChunks).
const inListMax = 2048

// keyList returns the condition `key IN (…)` naming the rows' keys as
// literals, or "" when the batch has more rows than inListMax or a key
// that is not one integer or text column stored as staged, or a text key
// that is not valid UTF-8 or holds a NUL.
func keyList(tb *upsert.TableBatch, rows []upsert.Row) string {
	if len(tb.Keys) != 1 || len(rows) == 0 || len(rows) > inListMax {
		return ""
	}
	k := tb.Keys[0]
	if typeOf(&tb.Cols[k]).conv != nil {
		return ""
	}
	b := make([]byte, 0, 16*len(rows))
	b = append(append(b, quote(tb.Cols[k].Name)...), " IN ("...)
	for i := range rows {
		if i > 0 {
			b = append(b, ", "...)
		}
		switch v := reflect.ValueOf(rows[i].Vals[k]); v.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			b = strconv.AppendInt(b, v.Int(), 10)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			b = strconv.AppendUint(b, v.Uint(), 10)
		case reflect.String:
			x := v.String()
			if !utf8.ValidString(x) || strings.IndexByte(x, 0) >= 0 {
				return "" // not text a statement can spell
			}
			b = append(append(append(b, '\''), strings.ReplaceAll(x, "'", "''")...), '\'')
		default:
			return ""
		}
	}
	return string(append(b, ')'))
}

package postgres

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

var ctx = context.Background()

// One throwaway server for the package; every test works in its own schema.
var (
	srvOnce sync.Once
	srv     *harness.Postgres
	srvErr  error
	schemas atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		_ = srv.Stop()
	}
	os.Exit(code)
}

func server(t testing.TB) *harness.Postgres {
	t.Helper()
	srvOnce.Do(func() { srv, srvErr = harness.StartPostgres(ctx, harness.PostgresOptions{}) })
	if srvErr != nil {
		harness.SkipOrFail(t, fmt.Errorf("postgres: %w", srvErr))
	}
	return srv
}

// freshSchema names a schema no other test uses.
func freshSchema() string { return fmt.Sprintf("t%d", schemas.Add(1)) }

func openSink(t testing.TB, opts Options) *Sink {
	t.Helper()
	if opts.DSN == "" {
		opts.DSN = server(t).DSN("postgres")
	}
	if opts.Schema == "" {
		opts.Schema = freshSchema()
	}
	s := New(opts, nil)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	return s
}

func ver(minor uint64) pipeline.Version { return pipeline.Version{0, 7, 0, minor} }

func dec(s string) pipeline.Decimal {
	d, err := pipeline.ParseDecimal(s)
	if err != nil {
		panic(err)
	}
	return d
}

func mustWrite(t *testing.T, s *Sink, recs ...pipeline.Record) {
	t.Helper()
	if err := s.Write(ctx, recs); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func rows(t *testing.T, s *Sink, table *pipeline.Table) map[string][]any {
	t.Helper()
	rs, err := s.Rows(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]any{}
	for _, r := range rs {
		out[sinktest.RowKey(table, r)] = r
	}
	return out
}

func expectRows(t *testing.T, s *Sink, table *pipeline.Table, want ...[]any) {
	t.Helper()
	w := map[string][]any{}
	for _, r := range want {
		w[sinktest.RowKey(table, r)] = r
	}
	if d := sinktest.Diff(table, w, rows(t, s, table)); d != "" {
		t.Fatalf("rows differ:\n%s", d)
	}
}

var people = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "people"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "name", Type: pipeline.TypeString},
		{Name: "bio", Type: pipeline.TypeText},
	},
	KeyIdx: []int{0}, Generation: 1,
}

func change(op pipeline.Op, v uint64, row ...any) pipeline.Record {
	return pipeline.Record{Op: op, Table: people, After: row, Version: ver(v)}
}

func del(v uint64, id int64) pipeline.Record {
	return pipeline.Record{Op: pipeline.OpDelete, Table: people, Before: []any{id, nil, nil}, Version: ver(v)}
}

// stored returns the raw target row of a key of people: version, deleted
// flag, presence.
func stored(t *testing.T, s *Sink, id int64) (pipeline.Version, bool, bool) {
	t.Helper()
	var b []byte
	var deleted bool
	err := s.conn.QueryRow(ctx, `SELECT _sluice_version, _sluice_deleted FROM `+s.qualified("public_people")+
		` WHERE id = $1`, id).Scan(&b, &deleted)
	if err != nil {
		return pipeline.Version{}, false, false
	}
	v, err := pipeline.ParseVersion(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return v, deleted, true
}

func columnTypes(t *testing.T, s *Sink, table string) map[string]string {
	t.Helper()
	rs, err := s.conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, s.qualified(table))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]string{}
	for rs.Next() {
		var c, typ string
		if err := rs.Scan(&c, &typ); err != nil {
			t.Fatal(err)
		}
		out[c] = typ
	}
	return out
}

package mysql

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// testSource returns an opened source on db's tables; it is closed at
// cleanup.
func testSource(t *testing.T, m *harness.MariaDB, from pipeline.Position, tweak func(*Options)) *Source {
	t.Helper()
	o := Options{Pipeline: t.Name(), DSN: fmt.Sprintf("mysql://root@%s:%d", m.Host, m.Port),
		HeartbeatInterval: time.Second, ReconnectInitial: 50 * time.Millisecond, ReconnectMax: time.Second}
	o.Snapshot.ChunkRows = 7
	if tweak != nil {
		tweak(&o)
	}
	s, err := New(o, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(ctx, from); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(ctx) })
	return s
}

// readCtx bounds a test's reads: a read that waits longer fails the test
// instead of hanging the package.
func readCtx(t *testing.T) context.Context {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	return rctx
}

// readRecords reads until n data records arrived (or the deadline), and
// returns them with the position of the last batch that had one.
func readRecords(t *testing.T, s *Source, n int) ([]pipeline.Record, pipeline.Position) {
	t.Helper()
	var out []pipeline.Record
	var last pipeline.Position
	deadline := time.Now().Add(60 * time.Second)
	for countData(out) < n {
		if time.Now().After(deadline) {
			t.Fatalf("read %d of %d records in 60s", countData(out), n)
		}
		rctx, cancel := context.WithTimeout(ctx, time.Until(deadline))
		b, err := s.Read(rctx)
		cancel()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if len(b.Dead) > 0 {
			t.Fatalf("dead letters: %+v", b.Dead)
		}
		out = append(out, b.Records...)
		if b.Pos != nil {
			last = b.Pos
		}
	}
	return out, last
}

func countData(recs []pipeline.Record) int {
	n := 0
	for i := range recs {
		if recs[i].Op.IsData() && recs[i].Op != pipeline.OpTruncate {
			n++
		}
	}
	return n
}

func dataOnly(recs []pipeline.Record) []pipeline.Record {
	var out []pipeline.Record
	for _, r := range recs {
		if r.Op.IsData() && r.Op != pipeline.OpTruncate {
			out = append(out, r)
		}
	}
	return out
}

// rootConn is a root session on db with time_zone UTC.
func rootConn(t testing.TB, m *harness.MariaDB, db string) *client.Conn {
	t.Helper()
	c, err := client.Connect(m.Host+":"+strconv.Itoa(m.Port), "root", "", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Execute("SET time_zone = '+00:00'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustExec(t testing.TB, c *client.Conn, sqls ...string) {
	t.Helper()
	for _, q := range sqls {
		if _, err := c.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// insertRows inserts n rows into table in one statement, row(i) giving
// the i-th row's values list ("(1, 'a')").
func insertRows(t testing.TB, c *client.Conn, table string, n int, row func(i int) string) {
	t.Helper()
	rows := make([]string, n)
	for i := range rows {
		rows[i] = row(i)
	}
	mustExec(t, c, "INSERT INTO "+table+" VALUES "+strings.Join(rows, ","))
}

type replicationHeader = replication.EventHeader

func testutilCounter(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

func nopLogger() *zap.Logger { return zap.NewNop() }

func contains(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

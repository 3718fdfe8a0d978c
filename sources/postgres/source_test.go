package postgres

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot/snaptest"
)

func TestPositionRoundTrip(t *testing.T) {
	p := Position{Phase: PhaseStream, Slot: "sluice_shop", LSN: 0x16B3748, SystemID: "7312345678901234567"}
	enc := p.Encode()
	if got := string(enc); got != `{"phase":"stream","slot":"sluice_shop","lsn":"0/16B3748","system_id":"7312345678901234567"}` {
		t.Fatalf("encoded %s", got)
	}
	back, err := ParsePosition(enc)
	if err != nil || back != p {
		t.Fatalf("parse: %+v, %v", back, err)
	}
	for _, bad := range []string{
		``, `{}`, `[]`, `{"phase":"snapshot","slot":"s","lsn":"0/1"}`,
		`{"phase":"stream","slot":"S-1","lsn":"0/1"}`,
		`{"phase":"stream","slot":"s","lsn":"0/0"}`,
		`{"phase":"stream","slot":"s","lsn":"16B3748"}`,
		`{"phase":"stream","slot":"s","lsn":"0/123456789"}`,
		`{"phase":"stream","slot":"s","lsn":"0/1","system_id":"abc"}`,
	} {
		if _, err := ParsePosition(pipeline.Position(bad)); err == nil {
			t.Errorf("ParsePosition(%s) accepted", bad)
		}
	}
}

func FuzzParsePosition(f *testing.F) {
	f.Add([]byte(`{"phase":"stream","slot":"sluice_shop","lsn":"0/16B3748","system_id":"7312345678901234567"}`))
	f.Add([]byte(`{"phase":"stream","slot":"a","lsn":"FFFFFFFF/FFFFFFFF"}`))
	f.Add([]byte(`{"phase":"stream","slot":"a","lsn":"1/0"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePosition(b)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("parsed an invalid position: %v", err)
		}
		again, err := ParsePosition(p.Encode())
		if err != nil || again != p {
			t.Fatalf("round trip of %+v: %+v, %v", p, again, err)
		}
	})
}

func TestOptionsValidation(t *testing.T) {
	base := Options{Pipeline: "Shop-1", DSN: "postgres://x@127.0.0.1/db", Tables: []string{"public.t"}}
	s, err := New(base, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.opts.Slot != "sluice_shop_1" || s.opts.Publication != "sluice_shop_1" || s.opts.Snapshot.Mode != SnapshotInitial {
		t.Fatalf("defaults: %+v", s.opts)
	}
	for name, mut := range map[string]func(*Options){
		"no tables":      func(o *Options) { o.Tables = nil },
		"bad table":      func(o *Options) { o.Tables = []string{"t"} },
		"injection":      func(o *Options) { o.Tables = []string{`public.t"; drop table x; --`} },
		"bad slot":       func(o *Options) { o.Slot = "Bad-Slot" },
		"bad pub":        func(o *Options) { o.Publication = "a'b" },
		"bad mode":       func(o *Options) { o.Snapshot.Mode = "sometimes" },
		"full not table": func(o *Options) { o.FullIdentityTables = []string{"public.u"} },
		"duplicate":      func(o *Options) { o.Tables = []string{"public.t", "public.t"} },
	} {
		o := base
		mut(&o)
		if _, err := New(o, nil, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// ---- helpers shared by the integration tests ----

// testDB starts a server with a "shop" database.
func testDB(t *testing.T, opts ...harness.PostgresOptions) (*harness.Postgres, context.Context) {
	t.Helper()
	pg := harness.PostgresT(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if err := pg.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	return pg, ctx
}

func exec(t *testing.T, ctx context.Context, pg *harness.Postgres, db string, sqls ...string) {
	t.Helper()
	if err := pg.Exec(ctx, db, sqls...); err != nil {
		t.Fatal(err)
	}
}

// dropSlotWhenIdle drops a slot once its walsender has gone (a closed
// Source's server process exits a moment after the connection closes).
func dropSlotWhenIdle(t *testing.T, ctx context.Context, pg *harness.Postgres, db, slot string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, pg.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		if err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if !active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s still active after 30s", slot)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
		t.Fatal(err)
	}
}

func testOptions(pg *harness.Postgres, tables ...string) Options {
	return Options{
		Pipeline: "test", DSN: pg.DSN("shop"), Tables: tables, Slot: "sluice_test", Publication: "sluice_test",
		HeartbeatInterval: 100 * time.Millisecond, StatusInterval: 100 * time.Millisecond,
		ReconnectInitial: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond,
		Snapshot: SnapshotOptions{Mode: SnapshotNever},
	}
}

func testLogger(t *testing.T) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// openSource opens a source and closes it at cleanup.
func openSource(t *testing.T, ctx context.Context, opts Options, from pipeline.Position) *Source {
	t.Helper()
	s, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(ctx, from); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func queryLSN(t *testing.T, ctx context.Context, pg *harness.Postgres, db, sql string, args ...any) pglogrepl.LSN {
	t.Helper()
	c, err := pgx.Connect(ctx, pg.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var s *string
	if err := c.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return 0
	}
	l, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func currentLSN(t *testing.T, ctx context.Context, pg *harness.Postgres) pglogrepl.LSN {
	return queryLSN(t, ctx, pg, "shop", "SELECT pg_current_wal_lsn()::text")
}

func confirmedLSN(t *testing.T, ctx context.Context, pg *harness.Postgres, slot string) pglogrepl.LSN {
	return queryLSN(t, ctx, pg, "shop", "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot)
}

func posLSN(t *testing.T, p pipeline.Position) pglogrepl.LSN {
	t.Helper()
	pp, err := ParsePosition(p)
	if err != nil {
		t.Fatal(err)
	}
	return pp.LSN
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type memSink = snaptest.MemSink

func newMemSink() *memSink { return snaptest.NewMemSink() }

// selectRows returns a query's rows as sorted strings, formatted like
// memSink.table.
func selectRows(t *testing.T, ctx context.Context, pg *harness.Postgres, sql string) []string {
	t.Helper()
	c, err := pgx.Connect(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, sql)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			switch x := v.(type) {
			case int32:
				vals[i] = int64(x)
			case int16:
				vals[i] = int64(x)
			}
		}
		out = append(out, fmt.Sprint(vals))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// reader drives a source the way the runtime does: Read, apply, then Ack
// the batch position when ack is set.
type reader struct {
	t       *testing.T
	src     *Source
	sink    *memSink
	ack     bool
	lastPos pipeline.Position
	batches []pipeline.Batch
}

func newReader(t *testing.T, src *Source, ack bool) *reader {
	return &reader{t: t, src: src, sink: newMemSink(), ack: ack}
}

// until reads until cond holds after a batch.
func (r *reader) until(ctx context.Context, what string, cond func() bool) {
	r.t.Helper()
	for !cond() {
		r.step(ctx, what)
	}
}

// step reads, applies and (with ack) acknowledges one batch.
func (r *reader) step(ctx context.Context, what string) {
	r.t.Helper()
	b, err := r.src.Read(ctx)
	if err != nil {
		r.t.Fatalf("read (waiting for %s): %v", what, err)
	}
	r.batches = append(r.batches, b)
	r.sink.Apply(b.Records)
	if b.Pos != nil {
		r.lastPos = b.Pos
		if r.ack {
			if err := r.src.Ack(ctx, b.Pos); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// reachLSN reads until a batch position at or beyond lsn.
func (r *reader) reachLSN(ctx context.Context, lsn pglogrepl.LSN) {
	r.t.Helper()
	r.until(ctx, "position "+lsn.String(), func() bool { return r.lastPos != nil && posLSN(r.t, r.lastPos) >= lsn })
}

func equalRows(t *testing.T, what string, got, want []string) {
	t.Helper()
	snaptest.EqualRows(t, what, got, want)
}

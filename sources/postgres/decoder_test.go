package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestDecoderChanges covers the transaction state machine on one server.
func TestDecoderChanges(t *testing.T) {
	pg := harness.PostgresT(t)

	t.Run("InterleavedCommitOrder", func(t *testing.T) {
		env := newReplEnv(t, pg, "interleave", nil, "CREATE TABLE t (id int PRIMARY KEY, v text)")
		ctx := testCtx(t)
		a, b := env.connect(ctx), env.connect(ctx)
		for _, s := range []struct {
			conn int
			sql  string
		}{{0, "BEGIN"}, {0, "INSERT INTO t VALUES (1, 'a1')"}, {1, "BEGIN"}, {1, "INSERT INTO t VALUES (2, 'b1')"},
			{0, "INSERT INTO t VALUES (3, 'a2')"}, {1, "COMMIT"}, {0, "COMMIT"}} {
			c := a
			if s.conn == 1 {
				c = b
			}
			if _, err := c.Exec(ctx, s.sql); err != nil {
				t.Fatal(err)
			}
		}
		d := newTestDecoder(t, env, DecoderOptions{})
		chunks := env.collect(ctx, d, 2)
		fin := finalChunks(chunks)
		if len(fin) != 2 || len(fin[0].Records) != 1 || len(fin[1].Records) != 2 {
			t.Fatalf("want transactions of 1 then 2 records, got %+v", fin)
		}
		if fin[0].Records[0].After[1] != "b1" || fin[1].Records[0].After[1] != "a1" || fin[1].Records[1].After[1] != "a2" {
			t.Fatalf("wrong commit order: %v %v", fin[0].Records, fin[1].Records)
		}
		if !(fin[0].CommitLSN < fin[1].CommitLSN) || fin[0].EndLSN <= fin[0].CommitLSN || fin[0].Xid == fin[1].Xid {
			t.Fatalf("LSNs/xids: %+v %+v", fin[0], fin[1])
		}
		all := records(chunks)
		for i := 1; i < len(all); i++ {
			if !all[i-1].Version.Less(all[i].Version) {
				t.Fatalf("versions not increasing at %d: %v then %v", i, all[i-1].Version, all[i].Version)
			}
		}
		r := fin[1].Records[1]
		if r.Version != streamVersion(0, fin[1].CommitLSN, 1) || r.TxID != uint64(fin[1].Xid) ||
			!r.EventTime.Equal(fin[1].CommitTime) || r.Size <= 0 {
			t.Fatalf("record fields: %+v", r)
		}
	})

	t.Run("PKUpdateDeleteTruncate", func(t *testing.T) {
		env := newReplEnv(t, pg, "pkupd", nil,
			"CREATE TABLE t (id int PRIMARY KEY, v text)", "CREATE TABLE u (k text PRIMARY KEY)",
			"CREATE TABLE f (id int PRIMARY KEY, v text)", "ALTER TABLE f REPLICA IDENTITY FULL")
		env.exec("INSERT INTO t VALUES (1, 'x'), (2, 'y')", "INSERT INTO u VALUES ('k')", "INSERT INTO f VALUES (1, 'p')",
			"UPDATE t SET id = 10 WHERE id = 1",
			"UPDATE t SET v = 'z' WHERE id = 2",
			"UPDATE f SET v = 'q'",
			"DELETE FROM t WHERE id = 2",
			"TRUNCATE t, u")
		ctx := testCtx(t)
		d := newTestDecoder(t, env, DecoderOptions{})
		fin := finalChunks(env.collect(ctx, d, 8))
		pk := fin[3].Records
		if len(pk) != 2 || pk[0].Op != pipeline.OpDelete || pk[1].Op != pipeline.OpInsert ||
			pk[0].Before[0] != int64(1) || pk[1].After[0] != int64(10) || pk[1].After[1] != "x" ||
			pk[0].Version[3] != rowBase || pk[1].Version[3] != rowBase+1 {
			t.Fatalf("PK update: %+v", pk)
		}
		up := fin[4].Records
		if len(up) != 1 || up[0].Op != pipeline.OpUpdate || up[0].Before != nil || up[0].After[1] != "z" {
			t.Fatalf("plain update: %+v", up)
		}
		full := fin[5].Records
		if len(full) != 1 || full[0].Op != pipeline.OpUpdate || full[0].Before[1] != "p" || full[0].After[1] != "q" {
			t.Fatalf("FULL update: %+v", full)
		}
		if tb := full[0].Table; len(tb.KeyIdx) != 0 {
			t.Fatalf("FULL table without catalog must not claim every column as key: %+v", tb)
		}
		del := fin[6].Records
		if len(del) != 1 || del[0].Op != pipeline.OpDelete || del[0].Before[0] != int64(2) || del[0].Before[1] != nil || del[0].After != nil {
			t.Fatalf("delete (key-only old tuple): %+v", del)
		}
		tr := fin[7].Records
		if len(tr) != 2 || tr[0].Op != pipeline.OpTruncate || tr[1].Op != pipeline.OpTruncate ||
			tr[0].Table.ID.Table == tr[1].Table.ID.Table || tr[0].Version[3] != rowBase || tr[1].Version[3] != rowBase+1 {
			t.Fatalf("truncate: %+v", tr)
		}
	})

	t.Run("UnchangedToast", func(t *testing.T) {
		big := "repeat('x', 1) || (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) i)"
		env := newReplEnv(t, pg, "toast", nil,
			"CREATE TABLE d (id int PRIMARY KEY, n int, big text)", "ALTER TABLE d ALTER big SET STORAGE EXTERNAL",
			"CREATE TABLE f (id int PRIMARY KEY, n int, big text)", "ALTER TABLE f ALTER big SET STORAGE EXTERNAL",
			"ALTER TABLE f REPLICA IDENTITY FULL")
		env.exec("INSERT INTO d VALUES (1, 0, "+big+")", "INSERT INTO f VALUES (1, 0, "+big+")",
			"UPDATE d SET n = 1", "UPDATE f SET n = 1", "UPDATE d SET id = 2")
		ctx := testCtx(t)
		d := newTestDecoder(t, env, DecoderOptions{Catalog: func(ctx context.Context, _ uint32, schema, name string) (*TableShape, error) {
			return LoadTableShape(ctx, env.connect(ctx), env.db, TableRef{Schema: schema, Name: name})
		}})
		fin := finalChunks(env.collect(ctx, d, 5))
		want := fin[0].Records[0].After[2].(string)
		if len(want) != 1+400*32 {
			t.Fatalf("insert value length %d", len(want))
		}
		if v := fin[2].Records[0].After[2]; v != pipeline.UnchangedValue {
			t.Fatalf("DEFAULT identity: unchanged TOAST decoded as %#v", v)
		}
		if v := fin[3].Records[0].After[2]; v != want {
			t.Fatalf("FULL identity: unchanged TOAST not filled from the old tuple")
		}
		if tb := fin[3].Records[0].Table; len(tb.KeyIdx) != 1 || tb.KeyIdx[0] != 0 || !tb.Columns[0].Key || tb.Columns[1].Key {
			t.Fatalf("FULL table with catalog keeps its primary key: %+v", tb)
		}
		pk := fin[4].Records
		if len(pk) != 2 || pk[1].Op != pipeline.OpInsert || pk[1].After[2] != pipeline.UnchangedValue {
			t.Fatalf("PK move with unchanged TOAST: %+v", pk)
		}
	})

	t.Run("SchemaChange", func(t *testing.T) {
		env := newReplEnv(t, pg, "ddl", nil, "CREATE TABLE t (id int PRIMARY KEY, a text NOT NULL)",
			"COMMENT ON COLUMN t.id IS 'the id'")
		env.exec("INSERT INTO t VALUES (1, 'x')", "ALTER TABLE t ADD COLUMN b numeric(8,3)",
			"INSERT INTO t VALUES (2, 'y', 1.5)", "ALTER TABLE t DROP COLUMN a",
			"INSERT INTO t VALUES (3, 2.25)", "ANALYZE t", "INSERT INTO t VALUES (4, 0)")
		ctx := testCtx(t)
		d := newTestDecoder(t, env, DecoderOptions{Catalog: func(ctx context.Context, _ uint32, schema, name string) (*TableShape, error) {
			return LoadTableShape(ctx, env.connect(ctx), env.db, TableRef{Schema: schema, Name: name})
		}})
		recs := records(env.collect(ctx, d, 4))
		if len(recs) != 4 {
			t.Fatalf("want 4 inserts, got %d", len(recs))
		}
		t1, t2, t3, t4 := recs[0].Table, recs[1].Table, recs[2].Table, recs[3].Table
		names := func(tb *pipeline.Table) string {
			var n []string
			for _, c := range tb.Columns {
				n = append(n, c.Name)
			}
			return strings.Join(n, ",")
		}
		if names(t1) != "id,a" || names(t2) != "id,a,b" || names(t3) != "id,b" || t3 != t4 {
			t.Fatalf("shapes: %s / %s / %s (same last: %v)", names(t1), names(t2), names(t3), t3 == t4)
		}
		if t1.Generation != 1 || t2.Generation != 2 || t3.Generation != 3 {
			t.Fatalf("generations %d %d %d", t1.Generation, t2.Generation, t3.Generation)
		}
		if c := t2.Columns[2]; c.Type != pipeline.TypeDecimal || c.Precision != 8 || c.Scale != 3 {
			t.Fatalf("added column: %+v", c)
		}
		// The catalog is read when the Relation is decoded, after the DROP:
		// columns it still has are enriched, the dropped one keeps defaults.
		for _, tb := range []*pipeline.Table{t1, t2, t3} {
			if c := tb.Columns[0]; c.Nullable || c.Comment != "the id" || c.SourceType != "integer" || !c.Key {
				t.Fatalf("catalog enrichment lost in generation %d: %+v", tb.Generation, c)
			}
		}
		if c := t3.Columns[1]; c.SourceType != "numeric(8,3)" || !c.Nullable {
			t.Fatalf("column b: %+v", c)
		}
		if !sameValue(recs[2].After[1], dec("2.250")) || len(recs[0].After) != 2 {
			t.Fatalf("values: %v %v", recs[0].After, recs[2].After)
		}
		if got := d.Tables()[pipeline.TableID{Database: env.db, Schema: "public", Table: "t"}]; got != t3 {
			t.Fatalf("Tables() does not return the newest shape")
		}
	})

	t.Run("LoadTableShape", func(t *testing.T) {
		env := newReplEnv(t, pg, "shape", nil,
			"CREATE TABLE k (a int, b text NOT NULL, g int GENERATED ALWAYS AS (a * 2) STORED, c varchar(7), PRIMARY KEY (b, a))",
			"COMMENT ON COLUMN k.c IS 'see'",
			"CREATE TABLE r (x int NOT NULL, y int NOT NULL, z numeric)",
			"CREATE UNIQUE INDEX r_yx ON r (y, x)", "ALTER TABLE r REPLICA IDENTITY USING INDEX r_yx",
			"CREATE TABLE n (x int)")
		ctx := testCtx(t)
		q := env.connect(ctx)
		k, err := LoadTableShape(ctx, q, "shape", TableRef{Schema: "public", Name: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if len(k.Columns) != 3 || k.Table.Columns[2].Name != "c" || fmt.Sprint(k.Table.KeyIdx) != "[1 0]" ||
			!k.HasPrimaryKey || k.ReplicaIdentity != 'd' || k.RelationOID == 0 || k.Table.Generation != 1 {
			t.Fatalf("k: %+v %+v", k, k.Table)
		}
		if c := k.Table.Columns[2]; c.Comment != "see" || c.SourceType != "character varying(7)" || c.Precision != 7 || !c.Nullable {
			t.Fatalf("k.c: %+v", c)
		}
		if c := k.Table.Columns[1]; c.Nullable || !c.Key || c.Type != pipeline.TypeString {
			t.Fatalf("k.b: %+v", c)
		}
		r, err := LoadTableShape(ctx, q, "shape", TableRef{Schema: "public", Name: "r"})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(r.Table.KeyIdx) != "[1 0]" || r.HasPrimaryKey || r.ReplicaIdentity != 'i' || r.Table.Columns[2].Scale != -1 {
			t.Fatalf("r: %+v", r.Table)
		}
		n, err := LoadTableShape(ctx, q, "shape", TableRef{Schema: "public", Name: "n"})
		if err != nil || len(n.Table.KeyIdx) != 0 {
			t.Fatalf("n: %v %+v", err, n)
		}
		if _, err := LoadTableShape(ctx, q, "shape", TableRef{Schema: "public", Name: "missing"}); !errors.Is(err, ErrTableNotFound) {
			t.Fatalf("missing table: %v", err)
		}
		// The stream's shape of k without catalog help: same columns, key
		// from the Relation flags (column order, as the message has it).
		env.exec("INSERT INTO k (a, b, c) VALUES (1, 'b', 'c')", "INSERT INTO r VALUES (1, 2, 3)")
		d := newTestDecoder(t, env, DecoderOptions{})
		recs := records(env.collect(ctx, d, 2))
		if tb := recs[0].Table; len(tb.Columns) != 3 || fmt.Sprint(tb.KeyIdx) != "[0 1]" || len(recs[0].After) != 3 {
			t.Fatalf("stream k: %+v", tb)
		}
		if tb := recs[1].Table; fmt.Sprint(tb.KeyIdx) != "[0 1]" {
			t.Fatalf("stream r: %+v", tb)
		}
	})

	t.Run("HeartbeatAndMessages", func(t *testing.T) {
		env := newReplEnv(t, pg, "hb", nil, "CREATE TABLE t (id int PRIMARY KEY)")
		ctx := testCtx(t)
		q := env.connect(ctx)
		const emitHB = `SELECT pg_logical_emit_message(false, 'sluice.heartbeat',
			to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text`
		for _, s := range []string{
			"SELECT pg_logical_emit_message(true, 'sluice.heartbeat', 'transactional')",
			"SELECT pg_logical_emit_message(false, 'other.prefix', 'x')",
		} {
			if _, err := q.Exec(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		var lsnText string
		if err := q.QueryRow(ctx, emitHB).Scan(&lsnText); err != nil {
			t.Fatal(err)
		}
		lsn, _ := pglogrepl.ParseLSN(lsnText)
		d := newTestDecoder(t, env, DecoderOptions{})
		fin := finalChunks(env.collect(ctx, d, 2))
		if len(fin[0].Records) != 0 {
			t.Fatalf("transactional message must yield an empty transaction, got %+v", fin[0].Records)
		}
		hb := fin[1]
		if len(hb.Records) != 1 || hb.Records[0].Op != pipeline.OpHeartbeat || hb.EndLSN != lsn || hb.Records[0].Table != nil {
			t.Fatalf("heartbeat chunk: %+v (want EndLSN %s)", hb, lsn)
		}
		if at := hb.Records[0].EventTime; at.IsZero() || time.Since(at) > time.Minute || at.Location() != time.UTC {
			t.Fatalf("heartbeat time %v", at)
		}
	})
}

// TestDecoderStreaming covers streamed in-progress transactions. The
// walsender decodes with logical_decoding_work_mem=64kB, so transactions
// of a few thousand rows are streamed; the decoder's small SpillThreshold
// sends them to disk.
func TestDecoderStreaming(t *testing.T) {
	pg := harness.PostgresT(t)
	env := newReplEnv(t, pg, "stream", map[string]string{"logical_decoding_work_mem": "64kB"},
		"CREATE TABLE t (id int PRIMARY KEY, v text)")
	ctx := testCtx(t)
	dir := t.TempDir()
	d := newTestDecoder(t, env, DecoderOptions{SpillDir: dir, SpillThreshold: 256 << 10, ChunkRecords: 5000})

	// A rolled-back streamed transaction yields nothing and leaves no file.
	// The server streams only what it decodes while the transaction is
	// open (a transaction already known as aborted is skipped), so the
	// decoder is driven until the open transaction's spill file exists.
	env.exec("INSERT INTO t VALUES (-1, 'start')")
	env.collect(ctx, d, 1)
	w := env.connect(ctx)
	for _, s := range []string{"BEGIN", "INSERT INTO t SELECT i, 'r' || i FROM generate_series(1, 20000) i"} {
		if _, err := w.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	env.collectUntil(ctx, d, func([]Chunk) bool { return d.Stats().SpillFiles == 1 })
	if files := spillFiles(t, dir); len(files) != 1 || d.Stats().OpenStreams != 1 {
		t.Fatalf("open streamed transaction: files %v, stats %+v", files, d.Stats())
	}
	if _, err := w.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	env.exec("INSERT INTO t VALUES (0, 'marker')")
	recs := records(env.collect(ctx, d, 1))
	if len(recs) != 1 || recs[0].After[1] != "marker" {
		t.Fatalf("rolled-back stream leaked %d records", len(recs))
	}
	st := d.Stats()
	if files := spillFiles(t, dir); len(files) != 0 || st.OpenStreams != 0 || st.SpillFiles != 0 || st.BufferedBytes != 0 || st.SpillBytes != 0 {
		t.Fatalf("after abort: files %v, stats %+v", files, st)
	}

	spilledBefore := d.Stats().SpilledTotal
	checkStreamedCommit(t, ctx, env, d)
	if d.Stats().SpilledTotal <= spilledBefore {
		t.Fatalf("committed stream did not spill: %+v", d.Stats())
	}
	if files := spillFiles(t, dir); len(files) != 0 {
		t.Fatalf("spill files left after commit: %v", files)
	}

	// The same in memory: a second slot, a threshold nothing reaches.
	env2 := newReplEnv(t, pg, "stream2", map[string]string{"logical_decoding_work_mem": "64kB"},
		"CREATE TABLE t (id int PRIMARY KEY, v text)")
	d2 := newTestDecoder(t, env2, DecoderOptions{SpillDir: dir, SpillThreshold: 1 << 30, ChunkRecords: 5000})
	checkStreamedCommit(t, ctx, env2, d2)
	if st := d2.Stats(); st.SpilledTotal != 0 || st.BufferedBytes != 0 || st.OpenStreams != 0 {
		t.Fatalf("in-memory stream: %+v", st)
	}
}

// checkStreamedCommit commits a transaction large enough to be streamed,
// with an aborted subtransaction, and checks every surviving row arrives
// once, in order, versioned with the commit LSN, in bounded chunks.
func checkStreamedCommit(t *testing.T, ctx context.Context, env *replEnv, d *Decoder) {
	t.Helper()
	env.exec("BEGIN",
		"INSERT INTO t SELECT i, repeat('v', 20) || i FROM generate_series(1, 20000) i",
		"SAVEPOINT s1",
		"INSERT INTO t SELECT i, 'gone' FROM generate_series(20001, 25000) i",
		"ROLLBACK TO SAVEPOINT s1",
		"INSERT INTO t SELECT i, 'kept' FROM generate_series(25001, 25003) i",
		"COMMIT")
	chunks := env.collect(ctx, d, 1)
	fin := finalChunks(chunks)[0]
	recs := records(chunks)
	if len(recs) != 20003 {
		t.Fatalf("want 20003 records, got %d", len(recs))
	}
	for _, c := range chunks {
		if len(c.Records) > 5000 || c.CommitLSN != fin.CommitLSN || (!c.Final && c.EndLSN != 0) {
			t.Fatalf("chunk of %d records, commit %s/%s, end %s, final %v", len(c.Records), c.CommitLSN, fin.CommitLSN, c.EndLSN, c.Final)
		}
	}
	if len(chunks) < 5 || fin.EndLSN <= fin.CommitLSN {
		t.Fatalf("%d chunks; final %+v", len(chunks), fin)
	}
	seen := map[int64]bool{}
	for i, r := range recs {
		if r.Version != streamVersion(0, fin.CommitLSN, uint64(i)) || r.Op != pipeline.OpInsert {
			t.Fatalf("record %d: op %v version %v", i, r.Op, r.Version)
		}
		id := r.After[0].(int64)
		if r.After[1] == "gone" || seen[id] {
			t.Fatalf("record %d: %v", i, r.After)
		}
		seen[id] = true
		if id <= 20000 && r.After[1] != fmt.Sprintf("vvvvvvvvvvvvvvvvvvvv%d", id) {
			t.Fatalf("record %d: %v", i, r.After)
		}
	}
}

package mysql

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// readBatches reads until a data record with key id arrives and returns
// every batch read on the way.
func readBatches(t *testing.T, s *Source, id int64) []pipeline.Batch {
	t.Helper()
	var out []pipeline.Batch
	deadline := time.Now().Add(60 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Until(deadline))
		b, err := s.Read(rctx)
		cancel()
		if err != nil {
			t.Fatalf("read (waiting for id %d): %v", id, err)
		}
		out = append(out, b)
		for _, r := range b.Records {
			if r.Op.IsData() && r.After != nil && r.After[0] == id {
				return out
			}
		}
	}
}

func dataIDs(batches []pipeline.Batch) (ids []int64, versions []pipeline.Version) {
	for _, b := range batches {
		for _, r := range b.Records {
			if r.Op.IsData() && r.After != nil {
				ids = append(ids, r.After[0].(int64))
				versions = append(versions, r.Version)
			}
		}
	}
	return ids, versions
}

// XA transactions on MariaDB arrive in commit order: a prepared XA's rows
// at its XA COMMIT (after a plain transaction committed in between), a
// rolled-back XA's never, a one-phase XA like any transaction. While an
// XA is prepared no position passes its prepare, so a crash before its XA
// COMMIT resumes before the prepare and still delivers its rows.
func TestXATransactionsInCommitOrder(t *testing.T) {
	m := server(t)
	xa, plain := rootConn(t, m, ""), rootConn(t, m, "")
	mustExec(t, plain, "CREATE DATABASE xa", "CREATE TABLE xa.t (id int PRIMARY KEY, v varchar(20))")
	start := gtidNow(t, plain)
	mustExec(t, xa, "XA START 'x1'", "INSERT INTO xa.t VALUES (1, 'two-phase')", "XA END 'x1'", "XA PREPARE 'x1'")
	mustExec(t, plain, "INSERT INTO xa.t VALUES (2, 'in between')")
	mustExec(t, xa, "XA COMMIT 'x1'",
		"XA START 'x2'", "INSERT INTO xa.t VALUES (3, 'rolled back')", "XA END 'x2'", "XA PREPARE 'x2'", "XA ROLLBACK 'x2'",
		"XA START 'x3'", "INSERT INTO xa.t VALUES (4, 'one phase')", "XA END 'x3'", "XA COMMIT 'x3' ONE PHASE")
	mustExec(t, plain, "INSERT INTO xa.t VALUES (5, 'last')")

	src := streamFrom(t, m, "xa.t", start, nil, nil)
	batches := readBatches(t, src, 5)
	ids, vers := dataIDs(batches)
	if !slices.Equal(ids, []int64{2, 1, 4, 5}) {
		t.Fatalf("rows arrived as %v, want commit order [2 1 4 5] without the rolled-back 3", ids)
	}
	for i := 1; i < len(vers); i++ {
		if !vers[i-1].Less(vers[i]) {
			t.Fatalf("versions not in commit order: %v", vers)
		}
	}
	ckpt := batches[len(batches)-1].Pos
	if ckpt == nil {
		t.Fatal("no position after the last transaction")
	}

	// A prepared XA holds back every position until it completes.
	mustExec(t, xa, "XA START 'x4'", "INSERT INTO xa.t VALUES (6, 'open at the crash')", "XA END 'x4'", "XA PREPARE 'x4'")
	mustExec(t, plain, "INSERT INTO xa.t VALUES (7, 'after the prepare')")
	for _, b := range readBatches(t, src, 7) {
		if b.Pos != nil {
			t.Fatalf("a position %s passed the open XA prepare", b.Pos)
		}
	}
	_ = src.Close(ctx) // the crash: the checkpoint is ckpt
	mustExec(t, xa, "XA COMMIT 'x4'")
	again := testSource(t, m, ckpt, func(o *Options) { o.Tables = []string{"xa.t"}; o.Snapshot.Mode = SnapshotNever })
	batches = readBatches(t, again, 6)
	if ids, _ := dataIDs(batches); !slices.Equal(ids, []int64{7, 6}) {
		t.Fatalf("after the restart: %v, want [7 6]", ids)
	}
	if batches[len(batches)-1].Pos == nil {
		t.Fatal("no position once the XA committed")
	}
}

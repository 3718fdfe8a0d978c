package postgres

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// preflightErr opens a source expecting a preflight failure.
func preflightErr(t *testing.T, opts Options) *PreflightError {
	t.Helper()
	s, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	err = s.Open(ctx, nil)
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("Open succeeded, want a preflight error")
	}
	if !pipeline.IsFatal(err) {
		t.Errorf("preflight error is not fatal: %v", err)
	}
	var pe *PreflightError
	if !errors.As(err, &pe) {
		t.Fatalf("error is not a *PreflightError: %v", err)
	}
	return pe
}

func wantProblem(t *testing.T, pe *PreflightError, parts ...string) {
	t.Helper()
	for _, p := range pe.Problems {
		ok := true
		for _, part := range parts {
			ok = ok && strings.Contains(p, part)
		}
		if ok {
			return
		}
	}
	t.Errorf("no problem mentions %q; got:\n%v", parts, pe)
}

func TestPreflightWALLevel(t *testing.T) {
	pg, ctx := testDB(t, harness.PostgresOptions{WALLevel: "replica"})
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY)")
	pe := preflightErr(t, testOptions(pg, "public.t"))
	wantProblem(t, pe, `wal_level is "replica"`, "ALTER SYSTEM SET wal_level = logical;", "restart PostgreSQL")
	if len(pe.Problems) != 1 {
		t.Errorf("want only the wal_level problem, got %v", pe)
	}
}

func TestPreflightRoleAndTables(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop",
		"CREATE ROLE cdc LOGIN PASSWORD 'pw'",
		"CREATE TABLE ok (id int PRIMARY KEY, body text)",
		"CREATE TABLE nopk (a int, b text)",
		"CREATE TABLE nopk2 (a int)",
		"CREATE TABLE secret (id int PRIMARY KEY)",
		"CREATE TABLE fullme (a int)",
		"CREATE TABLE deferred (id int PRIMARY KEY DEFERRABLE)",
		"CREATE TABLE byemail (id int PRIMARY KEY, email text NOT NULL)",
		"CREATE UNIQUE INDEX byemail_email ON byemail (email)", "ALTER TABLE byemail REPLICA IDENTITY USING INDEX byemail_email",
		"GRANT SELECT ON ok, nopk, nopk2, fullme, deferred, byemail TO cdc",
	)
	opts := testOptions(pg, "public.ok", "public.nopk", "public.nopk2", "public.secret", "public.missing", "public.fullme", "public.deferred", "public.byemail")
	opts.DSN = pg.UserDSN("cdc", "pw", "shop")
	opts.FullIdentityTables = []string{"public.fullme"}
	pe := preflightErr(t, opts)
	wantProblem(t, pe, "role cdc may not use replication", `ALTER ROLE "cdc" WITH REPLICATION;`)
	wantProblem(t, pe, "may not read table public.secret", `GRANT SELECT ON "public"."secret" TO "cdc";`)
	wantProblem(t, pe, "table public.missing does not exist")
	wantProblem(t, pe, "without a primary key or replica identity index: public.nopk, public.nopk2", "REPLICA IDENTITY USING INDEX", "full_identity_tables")
	// cdc does not own fullme, so it is told what to run.
	wantProblem(t, pe, "public.fullme is listed in full_identity_tables", `ALTER TABLE "public"."fullme" REPLICA IDENTITY FULL;`)
	// A deferrable key cannot be the replica identity: published under
	// DEFAULT, the table's updates would fail in the application.
	wantProblem(t, pe, "public.deferred has a DEFERRABLE primary key", "full_identity_tables", `ALTER TABLE "public"."deferred" REPLICA IDENTITY FULL;`)
	// An identity index off the primary key: deletes would carry the
	// e-mail, and the sinks find rows by id.
	wantProblem(t, pe, "public.byemail has REPLICA IDENTITY USING INDEX byemail_email", `ALTER TABLE "public"."byemail" REPLICA IDENTITY DEFAULT;`)
	if len(pe.Problems) != 7 {
		t.Errorf("want 7 problems, got %v", pe)
	}

	// As the owner, full_identity_tables are switched to REPLICA IDENTITY
	// FULL and the rest passes once the offenders are fixed.
	exec(t, ctx, pg, "shop", "ALTER TABLE nopk ADD PRIMARY KEY (a)", "ALTER TABLE nopk2 ALTER a SET NOT NULL",
		"CREATE UNIQUE INDEX nopk2_a ON nopk2 (a)", "ALTER TABLE nopk2 REPLICA IDENTITY USING INDEX nopk2_a")
	owner := testOptions(pg, "public.ok", "public.nopk", "public.nopk2", "public.fullme")
	owner.FullIdentityTables = []string{"public.fullme"}
	s := openSource(t, ctx, owner, nil)
	_ = s
	var ident string
	c := selectRows(t, ctx, pg, "SELECT relreplident::text FROM pg_class WHERE relname = 'fullme'")
	ident = c[0]
	if ident != "[f]" {
		t.Fatalf("fullme replica identity %s, want f", ident)
	}
}

// A hot standby takes no writes and hosts logical decoding only from
// PostgreSQL 16: on 15 the preflight says to use the primary; on 16 a
// publication that does not exist yet is refused with the statement to
// run on the primary, instead of a read-only transaction error.
func TestPreflightOnAStandby(t *testing.T) {
	t.Run("15", func(t *testing.T) {
		pg, ctx := testDB(t)
		if pg.Version >= 16 {
			harness.SkipOrFail(t, fmt.Errorf("the harness's PostgreSQL is %d; the refusal of a standby needs 15 or older", pg.Version))
		}
		exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY)")
		standby := pg.StandbyT(t)
		if err := standby.CatchUp(ctx, pg); err != nil {
			t.Fatal(err)
		}
		pe := preflightErr(t, testOptions(standby, "public.t"))
		wantProblem(t, pe, "hot standby", "needs PostgreSQL 16", "point the source at the primary")
	})
	t.Run("16", func(t *testing.T) {
		pg := harness.Postgres16T(t, harness.PostgresOptions{})
		ctx := t.Context()
		if err := pg.CreateDatabase(ctx, "shop"); err != nil {
			t.Fatal(err)
		}
		exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY)")
		standby := pg.StandbyT(t)
		if err := standby.CatchUp(ctx, pg); err != nil {
			t.Fatal(err)
		}
		s, err := New(testOptions(standby, "public.t"), testLogger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Open(ctx, nil)
		if err == nil {
			_ = s.Close(ctx)
			t.Fatal("Open succeeded without a publication")
		}
		for _, want := range []string{"hot standby", "run the statement on the primary", `CREATE PUBLICATION "sluice_test" FOR TABLE "public"."t"`} {
			if !strings.Contains(err.Error(), want) || !pipeline.IsFatal(err) {
				t.Fatalf("error does not say %q (or is not fatal): %v", want, err)
			}
		}
	})
}

package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// skewSettings make a server whose commits wait for a synchronous standby
// that never answers, when a session asks for it (synchronous_commit = on).
var skewSettings = harness.PostgresOptions{Settings: map[string]string{
	"synchronous_standby_names": "nobody", "synchronous_commit": "local"}}

// invisibleCommit runs sql (statements without BEGIN and COMMIT) in a
// transaction whose commit record is written, and so decoded, while
// other sessions still see it in progress: it waits for the standby. It
// returns once the commit waits; show makes it visible (the backend stops
// waiting, its transaction committed locally) and returns how its session
// ended.
func invisibleCommit(t *testing.T, ctx context.Context, pg *harness.Postgres, sql string) (show func() error) {
	t.Helper()
	skew, err := pgx.Connect(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { skew.Close(context.Background()) })
	var pid int
	if err := skew.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	go func() {
		_, err := skew.Exec(ctx, "BEGIN; SET LOCAL synchronous_commit = on; "+sql+"; COMMIT")
		committed <- err
	}()
	admin, err := pgx.Connect(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	waitFor(t, ctx, "the commit waiting for the standby", func() bool {
		var n int
		_ = admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'", pid).Scan(&n)
		return n == 1
	})
	return func() error {
		if _, err := admin.Exec(ctx, "SELECT pg_cancel_backend($1)", pid); err != nil {
			return err
		}
		if err := <-committed; err != nil {
			t.Logf("the skewed session ended with: %v", err)
		}
		return nil
	}
}

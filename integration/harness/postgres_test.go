package harness

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestPostgresStartsWithLogicalWAL(t *testing.T) {
	p := PostgresT(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, p.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var level string
	if err := c.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Fatalf("wal_level = %q, want logical", level)
	}
	if err := p.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if err := p.Exec(ctx, "shop", "CREATE TABLE t (id int primary key)", "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
}

package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A table switched to REPLICA IDENTITY USING INDEX on columns other than
// its primary key while the stream runs: its deletes and primary-key
// updates would carry the index's columns, so the sinks could not find the
// rows (a delete of key NULL, an old key left behind). The source stops at
// the switch, naming the fix, and hands over no change of it.
func TestIdentityIndexOffThePrimaryKeyStopsTheStream(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE ri (id int PRIMARY KEY, email text NOT NULL, n int)",
		"CREATE UNIQUE INDEX ri_email ON ri (email)")
	src := openSource(t, ctx, testOptions(pg, "public.ri"), nil)
	exec(t, ctx, pg, "shop",
		"INSERT INTO ri VALUES (1, 'a', 1), (2, 'b', 2)",
		"ALTER TABLE ri REPLICA IDENTITY USING INDEX ri_email",
		"DELETE FROM ri WHERE id = 1",
		"UPDATE ri SET id = 20 WHERE id = 2")
	var got []pipeline.Record
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		b, err := src.Read(rctx)
		cancel()
		if err != nil {
			if !pipeline.IsFatal(err) || errors.Is(err, context.DeadlineExceeded) ||
				!strings.Contains(err.Error(), "REPLICA IDENTITY USING INDEX on other columns than its primary key") ||
				!strings.Contains(err.Error(), "ALTER TABLE public.ri REPLICA IDENTITY DEFAULT;") {
				t.Fatalf("err = %v", err)
			}
			break
		}
		for _, r := range b.Records {
			if r.Op.IsData() {
				got = append(got, r)
			}
		}
	}
	if len(got) != 2 || got[0].Op != pipeline.OpInsert || got[1].Op != pipeline.OpInsert {
		t.Fatalf("handed over before the stop: %v", got)
	}
}

package postgres

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A column added with a constant default carries it as its missing value
// (attmissingval), decoded as its type: the rows that existed before the
// ALTER hold it without a change event, so sinks fill them with it.
func TestMissingValuesOfAddedColumns(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE m (id int PRIMARY KEY)", "INSERT INTO m VALUES (1)",
		`ALTER TABLE m ADD COLUMN u uuid DEFAULT '123e4567-e89b-12d3-a456-426614174000'`,
		`ALTER TABLE m ADD COLUMN tz timestamptz DEFAULT '2024-02-29 12:00:00.000001+02'`,
		`ALTER TABLE m ADD COLUMN ia integer[] DEFAULT '{1,NULL,3}'`,
		`ALTER TABLE m ADD COLUMN b boolean DEFAULT 'true'`,
		`ALTER TABLE m ADD COLUMN d date DEFAULT '0044-03-15 BC'`,
		`ALTER TABLE m ADD COLUMN n numeric DEFAULT 'Infinity'`,
		`ALTER TABLE m ADD COLUMN s text DEFAULT 'a''b'`,
		`ALTER TABLE m ADD COLUMN v integer DEFAULT 1 + 1`,      // a constant expression is folded
		`ALTER TABLE m ADD COLUMN at timestamptz DEFAULT now()`) // stable: evaluated once, at the ALTER
	conn, err := pgx.Connect(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	shape, err := LoadTableShape(ctx, conn, "shop", TableRef{Schema: "public", Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	var tz, at time.Time
	if err := conn.QueryRow(ctx, "SELECT tz, at FROM m").Scan(&tz, &at); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"u":  pipeline.UUID{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00},
		"tz": pipeline.TimestampOf(tz),
		"ia": []any{int64(1), nil, int64(3)},
		"b":  true,
		"d":  pipeline.DateOf(time.Date(-43, 3, 15, 0, 0, 0, 0, time.UTC)),
		"n":  pipeline.Decimal{Special: pipeline.PosInfinity},
		"s":  "a'b",
		"v":  int64(2),
		"at": pipeline.TimestampOf(at),
	}
	for _, c := range shape.Table.Columns {
		w, ok := want[c.Name]
		switch {
		case c.Name == "id":
		case !ok:
			t.Errorf("unexpected column %s", c.Name)
		case !reflect.DeepEqual(c.Missing, w):
			t.Errorf("column %s: missing value %#v, want %#v", c.Name, c.Missing, w)
		}
	}
}

// A column added to a table that then sees no row change still reaches the
// pipeline (Invariant 11): the next heartbeat after the ALTER carries the
// table's catalog digest, and the decoder emits the new shape, with the
// added column's missing value, as an OpShape record placed before every
// later change. A row changed afterwards keeps that shape (no further
// generation), and a heartbeat with nothing changed emits no shape.
func TestShapeChangeWithoutRowsReachesThePipeline(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE idle (id int PRIMARY KEY, v text)", "INSERT INTO idle VALUES (1, 'a')")
	src := openSource(t, ctx, testOptions(pg, "public.idle"), nil)
	r := newReader(t, src, true)
	exec(t, ctx, pg, "shop", "INSERT INTO idle VALUES (2, 'b')")
	var seen []pipeline.Record
	collect := func() func() bool {
		from := len(r.batches)
		return func() bool {
			for _, b := range r.batches[from:] {
				for _, rec := range b.Records {
					if rec.Table != nil && rec.Table.ID.Table == "idle" {
						seen = append(seen, rec)
					}
				}
			}
			from = len(r.batches)
			return false
		}
	}
	shapes := func(recs []pipeline.Record) (out []pipeline.Record) {
		for _, rec := range recs {
			if rec.Op == pipeline.OpShape {
				out = append(out, rec)
			}
		}
		return out
	}
	scan := collect()
	r.until(ctx, "the insert", func() bool {
		scan()
		for _, rec := range seen {
			if rec.Op == pipeline.OpInsert {
				return true
			}
		}
		return false
	})
	// Two heartbeats with nothing changed: no shape. (A heartbeat before
	// the first change may carry the catalog's shape: the decoder had not
	// seen the table yet.)
	seen = nil
	for hb := 0; hb < 2; {
		r.step(ctx, "heartbeats")
		scan()
		for _, rec := range r.batches[len(r.batches)-1].Records {
			if rec.Op == pipeline.OpHeartbeat {
				hb++
			}
		}
	}
	if got := shapes(seen); len(got) != 0 {
		t.Fatalf("shape records with no schema change: %v", got)
	}

	exec(t, ctx, pg, "shop", "ALTER TABLE idle ADD COLUMN n integer DEFAULT 7")
	altered := currentLSN(t, ctx, pg)
	r.until(ctx, "the new shape", func() bool { scan(); return len(shapes(seen)) > 0 })
	sh := shapes(seen)[0]
	if len(shapes(seen)) != 1 {
		t.Fatalf("%d shape records, want 1", len(shapes(seen)))
	}
	if at := pglogrepl.LSN(sh.Version[1]); at < altered {
		t.Fatalf("shape record at %s, before the ALTER's end %s", at, altered)
	}
	cols := sh.Table.Columns
	if len(cols) != 3 || cols[2].Name != "n" || cols[2].Missing != int64(7) || len(sh.Table.KeyIdx) != 1 || sh.Table.KeyIdx[0] != 0 {
		t.Fatalf("shape: columns %+v, key %v", cols, sh.Table.KeyIdx)
	}

	exec(t, ctx, pg, "shop", "UPDATE idle SET v = 'c' WHERE id = 1")
	r.until(ctx, "the update", func() bool {
		scan()
		return seen[len(seen)-1].Op == pipeline.OpUpdate
	})
	up := seen[len(seen)-1]
	if up.Table.Generation != sh.Table.Generation || len(up.Table.Columns) != 3 {
		t.Fatalf("update decoded with generation %d (%d columns), want the shape's %d", up.Table.Generation,
			len(up.Table.Columns), sh.Table.Generation)
	}
}

func TestParseHeartbeat(t *testing.T) {
	when, checks := parseHeartbeat([]byte("2026-12-03T09:00:00Z"))
	if when != "2026-12-03T09:00:00Z" || checks != nil {
		t.Fatalf("time alone: %q %v", when, checks)
	}
	when, checks = parseHeartbeat([]byte(`{"t" : "2026-12-03T09:00:00Z", "s" : [[16384, "public", "idle", "e1c7"], ["bad"], [1, 2, 3, 4]]}`))
	want := []shapeCheck{{oid: 16384, schema: "public", table: "idle", digest: "e1c7"}}
	if when != "2026-12-03T09:00:00Z" || !reflect.DeepEqual(checks, want) {
		t.Fatalf("JSON: %q %+v", when, checks)
	}
	// The digest of a decoded shape is heartbeatSQL's (checked against a
	// server in TestShapeChangeWithoutRowsReachesThePipeline).
	got := shapeDigest([]ColumnInfo{{Name: "id", OID: 23, TypMod: -1}, {Name: "v", OID: 25, TypMod: -1}})
	if got != "e1c7c9369ebfee17f8b51e83227ac9e9" {
		t.Fatalf("digest %s", got)
	}
}

// A heartbeat digest the catalog does not hold (a backlog of heartbeats
// from before a later schema change) is looked up once, then only every
// missSkips heartbeats, not once per heartbeat per table.
func TestMissedDigestIsNotLookedUpEveryHeartbeat(t *testing.T) {
	lookups := 0
	d, err := NewDecoder(DecoderOptions{Database: "shop", Log: testLogger(t),
		Catalog: func(context.Context, uint32, string, string) (*TableShape, error) {
			lookups++
			return &TableShape{RelationOID: 7, Columns: []ColumnInfo{{Name: "id", OID: 23, TypMod: -1}}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	checks := []shapeCheck{{oid: 7, schema: "public", table: "t", digest: "not the catalog's"}}
	const heartbeats = 2*(missSkips+1) + 1 // looked up at the 1st, 12th and 23rd
	for i := 0; i < heartbeats; i++ {
		if recs := d.checkShapes(context.Background(), checks, 1, pipeline.Record{}); len(recs) != 0 {
			t.Fatalf("heartbeat %d: %d shape records", i, len(recs))
		}
	}
	if lookups != 3 {
		t.Fatalf("%d catalog lookups for %d heartbeats, want 3", lookups, heartbeats)
	}
}

package postgres

import (
	"reflect"
	"testing"
	"time"

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

package mysql

import (
	"math"
	"math/big"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

const typesDDL = `CREATE TABLE types.t (
	id BIGINT UNSIGNED PRIMARY KEY,
	ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
	i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
	d DECIMAL(30,10), du DECIMAL(5,2) UNSIGNED, f FLOAT, db DOUBLE,
	b1 BIT(1), b12 BIT(12), b64 BIT(64),
	y YEAR, dt DATE, dtm DATETIME, dtm6 DATETIME(6), ts TIMESTAMP(3) NULL DEFAULT NULL, tm TIME, tm6 TIME(6),
	c CHAR(10), vc VARCHAR(100), tx TEXT, l1 VARCHAR(20) CHARACTER SET latin1,
	bn BINARY(4), vb VARBINARY(10), bl BLOB,
	e ENUM('small','medium','large'), s SET('a','b','c','d'),
	j JSON, g GEOMETRY, z DATE NULL, zt DATETIME NULL, gs GEOMETRY
)`

// typesRow inserts the extreme row; typesNulls a row of NULLs with a
// BIGINT UNSIGNED key above 2^63.
const typesRow = `INSERT INTO types.t VALUES (18446744073709551615,
	-128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615,
	-12345678901234567890.1234567890, 999.99, 3.1415927, 2.718281828459045,
	b'1', b'101010101010', 0xFFFFFFFFFFFFFFFF,
	2155, '1000-01-01', '9999-12-31 23:59:59', '2024-02-29 12:34:56.123456', '2038-01-19 03:14:07.999', '-838:59:59', '12:34:56.000001',
	'abc', 'héllo 🌍', 'long text', 'café',
	0x0102, 0x00ff, 0xdeadbeef,
	'medium', 'd,a',
	'{"k": [1, 2.5, "x"]}', ST_GeomFromText('POINT(1 2)'), '0000-00-00', '2024-00-10 00:00:00',
	ST_GeomFromText('POINT(1 2)', 4326))`

const typesNulls = `INSERT INTO types.t (id) VALUES (9223372036854775809)`

func dec(s string) pipeline.Decimal {
	d, err := pipeline.ParseDecimal(s)
	if err != nil {
		panic(err)
	}
	return d
}

// wantRow is the extreme row in the record model, column by column.
func wantRow() map[string]any {
	date := func(y int, m time.Month, d int) pipeline.Date {
		return pipeline.DateOf(time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
	}
	ts := func(t time.Time) pipeline.Timestamp { return pipeline.TimestampOf(t) }
	pointWKB := []byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0x40}
	// With SRID 4326: EWKB, the type's SRID flag set and the SRID after it.
	pointEWKB := append([]byte{1, 1, 0, 0, 0x20, 0xe6, 0x10, 0, 0}, pointWKB[5:]...)
	return map[string]any{
		"id": uint64(math.MaxUint64), "ti": int64(-128), "tiu": uint64(255), "si": int64(-32768), "siu": uint64(65535),
		"mi": int64(-8388608), "miu": uint64(16777215), "i": int64(math.MinInt32), "iu": uint64(math.MaxUint32),
		"bi": int64(math.MinInt64), "biu": uint64(math.MaxUint64),
		"d": dec("-12345678901234567890.1234567890"), "du": dec("999.99"),
		"f": float64(float32(3.1415927)), "db": 2.718281828459045,
		"b1": []byte{1}, "b12": []byte{0x0a, 0xaa}, "b64": []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"y": int64(2155), "dt": date(1000, 1, 1), "dtm": ts(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)),
		"dtm6": ts(time.Date(2024, 2, 29, 12, 34, 56, 123456000, time.UTC)),
		"ts":   ts(time.Date(2038, 1, 19, 3, 14, 7, 999000000, time.UTC)),
		"tm":   pipeline.Interval{Micros: -(838*3600 + 59*60 + 59) * 1e6}, "tm6": pipeline.Interval{Micros: (12*3600+34*60+56)*1e6 + 1},
		"c": "abc", "vc": "héllo 🌍", "tx": "long text", "l1": "café",
		"bn": []byte{1, 2, 0, 0}, "vb": []byte{0, 0xff}, "bl": []byte{0xde, 0xad, 0xbe, 0xef},
		"e": "medium", "s": "a,d",
		"j": "{\"k\": [1, 2.5, \"x\"]}", "g": pointWKB, "z": nil, "zt": nil, "gs": pointEWKB,
	}
}

func TestTypesRoundTrip(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE types", typesDDL, typesRow)
	// The snapshot reads the first row; the stream the second and an
	// update that writes the first row's values again under a new key.
	snap := testSource(t, m, nil, func(o *Options) { o.Tables = []string{"types.t"} })
	snapRecs, _ := readRecords(t, snap, 1)
	mustExec(t, c, typesNulls, "INSERT INTO types.t SELECT 1, ti, tiu, si, siu, mi, miu, i, iu, bi, biu, d, du, f, db, b1, b12, b64, "+
		"y, dt, dtm, dtm6, ts, tm, tm6, c, vc, tx, l1, bn, vb, bl, e, s, j, g, z, zt, gs FROM types.t WHERE id = 18446744073709551615")
	streamRecs, _ := readRecords(t, snap, 2)
	stream := dataOnly(streamRecs)

	want := wantRow()
	check := func(where string, r pipeline.Record, id any) {
		t.Helper()
		got := map[string]any{}
		for i, col := range r.Table.Columns {
			got[col.Name] = r.After[i]
		}
		for name, w := range want {
			g := got[name]
			if name == "id" {
				w = id
			}
			if name == "j" { // MariaDB keeps a JSON document as written
				w = pipeline.JSON("{\"k\": [1, 2.5, \"x\"]}")
			}
			if wd, ok := w.(pipeline.Decimal); ok {
				gd, ok := g.(pipeline.Decimal)
				if !ok || !gd.Equal(wd) {
					t.Errorf("%s: %s = %v (%T), want %v", where, name, g, g, wd)
				}
				continue
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s: %s = %#v (%T), want %#v (%T)", where, name, g, g, w, w)
			}
		}
	}
	check("snapshot", dataOnly(snapRecs)[0], uint64(math.MaxUint64))
	check("stream", stream[1], uint64(1))

	nulls := stream[0]
	if id := nulls.After[0]; id != uint64(1)<<63+1 {
		t.Errorf("unsigned key above 2^63 = %#v", id)
	}
	for i, v := range nulls.After[1:] {
		if v != nil {
			t.Errorf("column %s of the NULL row = %#v", nulls.Table.Columns[i+1].Name, v)
		}
	}
	// The snapshot's shape (from the catalog) and the stream's (from the
	// TABLE_MAP) are one and the same table.
	if snapT, streamT := dataOnly(snapRecs)[0].Table, stream[1].Table; snapT != streamT {
		for i := range snapT.Columns {
			if !reflect.DeepEqual(snapT.Columns[i], streamT.Columns[i]) {
				t.Errorf("column %d: snapshot %+v, stream %+v", i, snapT.Columns[i], streamT.Columns[i])
			}
		}
		t.Errorf("snapshot and stream shapes differ")
	}
	col := func(name string) pipeline.Column {
		for _, c := range stream[1].Table.Columns {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no column %s", name)
		return pipeline.Column{}
	}
	for name, typ := range map[string]pipeline.Type{"id": pipeline.TypeUint64, "ti": pipeline.TypeInt16, "tiu": pipeline.TypeUint8,
		"d": pipeline.TypeDecimal, "f": pipeline.TypeFloat32, "b12": pipeline.TypeBit, "dtm6": pipeline.TypeTimestamp,
		"ts": pipeline.TypeTimestampTZ, "tm": pipeline.TypeInterval, "e": pipeline.TypeEnum, "s": pipeline.TypeSet,
		"g": pipeline.TypeGeometry, "bn": pipeline.TypeBytes, "l1": pipeline.TypeString, "j": pipeline.TypeJSON, "tx": pipeline.TypeString} {
		if c := col(name); c.Type != typ {
			t.Errorf("column %s: type %s, want %s", name, c.Type, typ)
		}
	}
	if c := col("d"); c.Precision != 30 || c.Scale != 10 {
		t.Errorf("decimal column: %+v", c)
	}
	if c := col("e"); !reflect.DeepEqual(c.Enum, []string{"small", "medium", "large"}) {
		t.Errorf("enum labels %q", c.Enum)
	}
	if !col("id").Key || col("ti").Key || !col("z").Nullable {
		t.Errorf("key / nullable flags wrong")
	}
	_ = big.NewInt
}

package mysql

import (
	"encoding/json"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// Binlog filters that leave the watermark table's database out are
// found: its watermarks would never reach the stream.
func TestWatermarkDatabaseFilteredOut(t *testing.T) {
	for _, c := range []struct {
		do, ignore string
		out        bool
	}{
		{"", "", false},
		{"shop,sluice", "", false},
		{"shop", "", true},
		{"", "sluice", true},
		{"", "mysql, SLUICE", true},
		{"shop", "other", true},
		{"", "other", false},
	} {
		if got := filteredOut("sluice", c.do, c.ignore); got != c.out {
			t.Errorf("binlog_do_db %q, binlog_ignore_db %q: filtered out %v, want %v", c.do, c.ignore, got, c.out)
		}
	}
}

// Cursors keep their values' Go types through the checkpoint's JSON, and
// ENUM, SET and BIT keys are bound by the number they sort by.
func TestCursorsAndBounds(t *testing.T) {
	in := []any{int64(-5), uint64(1 << 63), 1.5, []byte("ä b"), []byte{0xff, 0x00}}
	c, err := encodeCursor(in)
	if err != nil {
		t.Fatal(err)
	}
	var items []string
	if err := json.Unmarshal(c, &items); err != nil || items[3] != "s:ä b" || items[4] != "x:ff00" {
		t.Fatalf("cursor %s", c)
	}
	out, err := decodeCursor(c, len(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []any{int64(-5), uint64(1 << 63), 1.5, "ä b", []byte{0xff, 0x00}}
	for i := range want {
		if g, w := out[i], want[i]; fmtAny(g) != fmtAny(w) {
			t.Errorf("item %d: %#v, want %#v", i, g, w)
		}
	}
	if _, err := decodeCursor(c, 2); err == nil {
		t.Fatal("a cursor of another key width was accepted")
	}
	enum := &colDesc{name: "e", kind: gomysql.MYSQL_TYPE_ENUM, labels: []string{"zulu", "alpha", "mike"}}
	set := &colDesc{name: "s", kind: gomysql.MYSQL_TYPE_SET, labels: []string{"a", "b", "c"}}
	bit := &colDesc{name: "b", kind: gomysql.MYSQL_TYPE_BIT, length: 12}
	for _, c := range []struct {
		d    *colDesc
		v    any
		want any
	}{
		{enum, []byte("alpha"), int64(2)},
		{set, []byte("a,c"), uint64(5)},
		{bit, []byte{0x0a, 0xbc}, uint64(0xabc)},
	} {
		got, err := boundOf(c.d, c.v)
		if err != nil || got != c.want {
			t.Errorf("%s %q: bound %#v (%v), want %#v", c.d.name, c.v, got, err, c.want)
		}
	}
	if _, err := boundOf(enum, []byte("nope")); err == nil {
		t.Error("an ENUM value outside its labels was bound")
	}
}

func fmtAny(v any) string { b, _ := json.Marshal(v); return string(b) }

package mysql

import (
	"reflect"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// A held key reads as fieldValue read the row's key columns when they were
// held, whatever the connection's buffer holds afterwards.
func TestHeldKeyReadsAsFieldValue(t *testing.T) {
	buf := []byte("abc")
	row := []gomysql.FieldValue{
		gomysql.NewFieldValue(gomysql.FieldValueTypeSigned, uint64(1<<63|5), nil),
		gomysql.NewFieldValue(gomysql.FieldValueTypeString, 0, buf),
		gomysql.NewFieldValue(gomysql.FieldValueTypeUnsigned, 1<<64-1, nil),
		gomysql.NewFieldValue(gomysql.FieldValueTypeNull, 0, nil),
	}
	keyIdx := []int{2, 1, 0, 3}
	want := make([]any, len(keyIdx))
	for i, k := range keyIdx {
		want[i] = fieldValue(row[k])
	}
	var h heldKey
	h.hold(row, keyIdx)
	copy(buf, "xyz") // the next row reuses the buffer
	if !h.seen {
		t.Fatal("nothing held")
	}
	if got := h.values(); !reflect.DeepEqual(got, want) {
		t.Fatalf("held key %#v, want %#v", got, want)
	}
	if h.seen {
		t.Fatal("values left seen set")
	}
}

package mysql

import (
	"math"
	"strings"
	"unsafe"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
)

// The snapshot's chunk reads, the initial load and verify read rows with
// prepared statements (the binary protocol, which sends numbers and
// floats exactly). Two costs of that protocol are avoided here, for all
// three alike:
//
//   - go-mysql formats a binary DATE, DATETIME, TIMESTAMP or TIME with
//     fmt into the text the converter then parses: selectList has the
//     server send those columns as their text instead (CAST … AS CHAR,
//     the same text the text protocol would send, so the same values);
//   - a field's bytes alias go-mysql's packet buffer and were copied
//     before the converter copied them again: rowReader hands the
//     converter the alias, and the converter copies what it keeps.

// selectList is the SELECT list of descs, in their order. The
// expressions are not aliased: ORDER BY and WHERE name the columns, and
// an alias of the same name would make ORDER BY sort the text.
func selectList(descs []colDesc) string {
	cols := make([]string, len(descs))
	for i := range descs {
		cols[i] = quoteIdent(descs[i].name)
		switch descs[i].kind {
		case gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_TIMESTAMP, gomysql.MYSQL_TYPE_TIME:
			cols[i] = "CAST(" + cols[i] + " AS CHAR)"
		}
	}
	return strings.Join(cols, ", ")
}

// rowBlock is how many rows' values one allocation holds.
const rowBlock = 256

// rowReader converts the rows of a selectList query into values. The
// rows it returns share blocks of cells: a row lives as long as any row
// of its block does.
type rowReader struct {
	conv  converter
	descs []colDesc
	cells []any
}

// row converts row. A value the converter refuses gives its column's
// index and the error; the row's other values are then not returned.
func (rr *rowReader) row(row []gomysql.FieldValue) ([]any, int, error) {
	n := len(row)
	if len(rr.cells) < n {
		rr.cells = make([]any, n*rowBlock)
	}
	out := rr.cells[:n:n]
	rr.cells = rr.cells[n:]
	for i := range row {
		v, err := rr.conv.field(&rr.descs[i], row[i])
		if err != nil {
			return nil, i, err
		}
		out[i] = v
	}
	return out, -1, nil
}

// field converts fv as value converts the same value of a read (not the
// binlog): the common kinds straight from the field, without boxing it
// first, the others through value.
func (cv *converter) field(d *colDesc, fv gomysql.FieldValue) (any, error) {
	switch fv.Type {
	case gomysql.FieldValueTypeNull:
		return nil, nil
	case gomysql.FieldValueTypeSigned:
		if isInteger(d.kind) {
			i := fv.AsInt64()
			return intValue(i, uint64(i), i < 0, d.intUnsigned())
		}
	case gomysql.FieldValueTypeUnsigned:
		if isInteger(d.kind) {
			u := fv.AsUint64()
			return intValue(int64(u), u, false, d.intUnsigned())
		}
	case gomysql.FieldValueTypeString:
		b := fv.AsString()
		switch d.kind {
		case gomysql.MYSQL_TYPE_NEWDECIMAL:
			return pipeline.ParseDecimal(view(b))
		case gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_TIMESTAMP:
			return cv.timestamp(view(b))
		case gomysql.MYSQL_TYPE_JSON:
			return jsonValue(string(b)), nil
		case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_STRING, gomysql.MYSQL_TYPE_BLOB:
			if !d.binary {
				return utf8Text(d, b)
			}
		}
	}
	return cv.value(d, fieldView(fv), false)
}

// fieldView is fv as the converter takes it; bytes alias go-mysql's
// buffer and are valid only until the next row (fieldValue copies them).
func fieldView(fv gomysql.FieldValue) any {
	switch fv.Type {
	case gomysql.FieldValueTypeNull:
		return nil
	case gomysql.FieldValueTypeUnsigned:
		return fv.AsUint64()
	case gomysql.FieldValueTypeSigned:
		return fv.AsInt64()
	case gomysql.FieldValueTypeFloat:
		return fv.AsFloat64()
	}
	return fv.AsString()
}

// viewOf is the text of v for parsing only: the string aliases v's bytes
// and must not outlive the call that parses it.
func viewOf(v any) string {
	if b, ok := v.([]byte); ok {
		return view(b)
	}
	return textOf(v)
}

// view is b as a string for parsing only (viewOf).
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// heldKey holds the key columns of the last row a read returned. The
// row's values are views of the connection's buffer, which the next row
// reuses: hold copies them into the same buffers each row (no allocation
// a row), values boxes them once, for the read's cursor.
type heldKey struct {
	cols []heldValue
	seen bool // a row was held since the last values
}

type heldValue struct {
	typ gomysql.FieldValueType
	n   uint64 // a signed or unsigned integer, or a float's bits
	b   []byte // a string's bytes
}

// hold keeps row's columns keyIdx.
func (h *heldKey) hold(row []gomysql.FieldValue, keyIdx []int) {
	if len(h.cols) != len(keyIdx) {
		h.cols = make([]heldValue, len(keyIdx))
	}
	for i, k := range keyIdx {
		fv, c := row[k], &h.cols[i]
		c.typ = fv.Type
		switch fv.Type {
		case gomysql.FieldValueTypeUnsigned:
			c.n = fv.AsUint64()
		case gomysql.FieldValueTypeSigned:
			c.n = uint64(fv.AsInt64())
		case gomysql.FieldValueTypeFloat:
			c.n = math.Float64bits(fv.AsFloat64())
		case gomysql.FieldValueTypeString:
			c.b = append(c.b[:0], fv.AsString()...)
		}
	}
	h.seen = true
}

// values returns the held key as fieldValue returns each column, and
// clears seen.
func (h *heldKey) values() []any {
	out := make([]any, len(h.cols))
	for i, c := range h.cols {
		switch c.typ {
		case gomysql.FieldValueTypeUnsigned:
			out[i] = c.n
		case gomysql.FieldValueTypeSigned:
			out[i] = int64(c.n)
		case gomysql.FieldValueTypeFloat:
			out[i] = math.Float64frombits(c.n)
		case gomysql.FieldValueTypeString:
			out[i] = append([]byte(nil), c.b...)
		}
	}
	h.seen = false
	return out
}

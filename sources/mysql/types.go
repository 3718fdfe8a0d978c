package mysql

import (
	"fmt"
	"sort"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
)

// colDesc describes one column the way both the binlog (TABLE_MAP with
// binlog_row_metadata=FULL) and the catalog (information_schema) can tell
// it, so that a snapshot row and a streamed row of the same table have the
// same shape and the same values.
type colDesc struct {
	name     string
	kind     byte // MYSQL_TYPE_* with ENUM/SET/DATE/VARCHAR resolved (see normKind)
	unsigned bool
	binary   bool   // binary collation: BINARY, VARBINARY, BLOB
	charset  string // character set of text columns ("utf8mb4", "latin1", …)
	// length: CHAR/VARCHAR/BINARY maximum length in characters (bytes
	// for binary); BIT width in bits.
	length    int
	precision int // DECIMAL total digits
	scale     int // DECIMAL digits after the point; fractional seconds digits of time types
	labels    []string
	nullable  bool
	keyPos    int // 1-based position in the primary key, 0 when not a key column
}

// normKind folds the binlog's storage types onto one kind per SQL type.
func normKind(t byte) byte {
	switch t {
	case gomysql.MYSQL_TYPE_NEWDATE:
		return gomysql.MYSQL_TYPE_DATE
	case gomysql.MYSQL_TYPE_VAR_STRING:
		return gomysql.MYSQL_TYPE_VARCHAR
	case gomysql.MYSQL_TYPE_TIMESTAMP2:
		return gomysql.MYSQL_TYPE_TIMESTAMP
	case gomysql.MYSQL_TYPE_DATETIME2:
		return gomysql.MYSQL_TYPE_DATETIME
	case gomysql.MYSQL_TYPE_TIME2:
		return gomysql.MYSQL_TYPE_TIME
	case gomysql.MYSQL_TYPE_TINY_BLOB, gomysql.MYSQL_TYPE_MEDIUM_BLOB, gomysql.MYSQL_TYPE_LONG_BLOB:
		return gomysql.MYSQL_TYPE_BLOB
	case gomysql.MYSQL_TYPE_DECIMAL:
		return gomysql.MYSQL_TYPE_NEWDECIMAL
	}
	return t
}

// column maps a column onto the record model:
//
//	TINYINT/SMALLINT/MEDIUMINT/INT/BIGINT  int16/int16/int32/int32/int64, or
//	                                       uint8/uint16/uint32/uint32/uint64 when UNSIGNED
//	DECIMAL(p,s)                           decimal (exact)
//	FLOAT / DOUBLE                         float32 / float64
//	BIT(n)                                 bit: big-endian bytes, ⌈n/8⌉ long
//	YEAR                                   int16
//	DATE / DATETIME(fsp)                   date / timestamp (wall clock, no zone)
//	TIMESTAMP(fsp)                         timestamptz (UTC)
//	TIME(fsp)                              interval (±838:59:59.999999 does not fit a time of day)
//	CHAR/VARCHAR/TEXT                      string, converted from the column's charset to UTF-8
//	BINARY/VARBINARY/BLOB                  bytes
//	ENUM / SET                             enum / set, by label ("a,c" for sets)
//	JSON                                   json (MariaDB: LONGTEXT with json_valid, see shapes.jsonCols)
//	GEOMETRY                               geometry: WKB, or EWKB carrying the SRID when it is not 0
func (d *colDesc) column() pipeline.Column {
	c := pipeline.Column{Name: d.name, Nullable: d.nullable, Key: d.keyPos > 0, Scale: -1}
	intType := func(signed, unsigned pipeline.Type) pipeline.Type {
		if d.unsigned {
			return unsigned
		}
		return signed
	}
	u := ""
	if d.unsigned {
		u = " unsigned"
	}
	switch d.kind {
	case gomysql.MYSQL_TYPE_TINY:
		c.Type, c.SourceType = intType(pipeline.TypeInt16, pipeline.TypeUint8), "tinyint"+u
	case gomysql.MYSQL_TYPE_SHORT:
		c.Type, c.SourceType = intType(pipeline.TypeInt16, pipeline.TypeUint16), "smallint"+u
	case gomysql.MYSQL_TYPE_INT24:
		c.Type, c.SourceType = intType(pipeline.TypeInt32, pipeline.TypeUint32), "mediumint"+u
	case gomysql.MYSQL_TYPE_LONG:
		c.Type, c.SourceType = intType(pipeline.TypeInt32, pipeline.TypeUint32), "int"+u
	case gomysql.MYSQL_TYPE_LONGLONG:
		c.Type, c.SourceType = intType(pipeline.TypeInt64, pipeline.TypeUint64), "bigint"+u
	case gomysql.MYSQL_TYPE_NEWDECIMAL:
		c.Type, c.Precision, c.Scale = pipeline.TypeDecimal, d.precision, d.scale
		c.SourceType = fmt.Sprintf("decimal(%d,%d)%s", d.precision, d.scale, u)
	case gomysql.MYSQL_TYPE_FLOAT:
		c.Type, c.SourceType = pipeline.TypeFloat32, "float"+u
	case gomysql.MYSQL_TYPE_DOUBLE:
		c.Type, c.SourceType = pipeline.TypeFloat64, "double"+u
	case gomysql.MYSQL_TYPE_BIT:
		c.Type, c.Precision, c.SourceType = pipeline.TypeBit, d.length, fmt.Sprintf("bit(%d)", d.length)
	case gomysql.MYSQL_TYPE_YEAR:
		c.Type, c.SourceType = pipeline.TypeInt16, "year"
	case gomysql.MYSQL_TYPE_DATE:
		c.Type, c.SourceType = pipeline.TypeDate, "date"
	case gomysql.MYSQL_TYPE_DATETIME:
		c.Type, c.SourceType = pipeline.TypeTimestamp, withFSP("datetime", d.scale)
	case gomysql.MYSQL_TYPE_TIMESTAMP:
		c.Type, c.SourceType = pipeline.TypeTimestampTZ, withFSP("timestamp", d.scale)
	case gomysql.MYSQL_TYPE_TIME:
		c.Type, c.SourceType = pipeline.TypeInterval, withFSP("time", d.scale)
	case gomysql.MYSQL_TYPE_VARCHAR:
		c.Precision = d.length
		if d.binary {
			c.Type, c.SourceType = pipeline.TypeBytes, fmt.Sprintf("varbinary(%d)", d.length)
		} else {
			c.Type, c.SourceType = pipeline.TypeString, fmt.Sprintf("varchar(%d)", d.length)
		}
	case gomysql.MYSQL_TYPE_STRING:
		c.Precision = d.length
		if d.binary {
			c.Type, c.SourceType = pipeline.TypeBytes, fmt.Sprintf("binary(%d)", d.length)
		} else {
			c.Type, c.SourceType = pipeline.TypeString, fmt.Sprintf("char(%d)", d.length)
		}
	case gomysql.MYSQL_TYPE_BLOB:
		if d.binary {
			c.Type, c.SourceType = pipeline.TypeBytes, "blob"
		} else {
			c.Type, c.SourceType = pipeline.TypeString, "text"
		}
	case gomysql.MYSQL_TYPE_ENUM:
		c.Type, c.Enum, c.SourceType = pipeline.TypeEnum, d.labels, "enum("+quoteLabels(d.labels)+")"
	case gomysql.MYSQL_TYPE_SET:
		c.Type, c.Enum, c.SourceType = pipeline.TypeSet, d.labels, "set("+quoteLabels(d.labels)+")"
	case gomysql.MYSQL_TYPE_JSON:
		c.Type, c.SourceType = pipeline.TypeJSON, "json"
	case gomysql.MYSQL_TYPE_GEOMETRY:
		c.Type, c.SourceType = pipeline.TypeGeometry, "geometry"
	default:
		c.Type, c.SourceType = pipeline.TypeBytes, fmt.Sprintf("type%d", d.kind)
	}
	if !d.binary && d.charset != "" && isText(c.Type) && d.charset != "utf8mb4" {
		c.SourceType += " character set " + d.charset
	}
	return c
}

func isText(t pipeline.Type) bool {
	return t == pipeline.TypeString || t == pipeline.TypeEnum || t == pipeline.TypeSet
}

func withFSP(name string, fsp int) string {
	if fsp > 0 {
		return fmt.Sprintf("%s(%d)", name, fsp)
	}
	return name
}

func quoteLabels(labels []string) string {
	q := make([]string, len(labels))
	for i, l := range labels {
		q[i] = "'" + strings.ReplaceAll(l, "'", "''") + "'"
	}
	return strings.Join(q, ",")
}

// sameDescs reports whether two descriptions give the same table shape.
func sameDescs(a, b []colDesc) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.name != y.name || x.kind != y.kind || x.unsigned != y.unsigned || x.binary != y.binary || x.charset != y.charset ||
			x.length != y.length || x.precision != y.precision || x.scale != y.scale || x.nullable != y.nullable ||
			x.keyPos != y.keyPos || strings.Join(x.labels, "\x00") != strings.Join(y.labels, "\x00") {
			return false
		}
	}
	return true
}

// signable reports the kinds that can be UNSIGNED.
func signable(k byte) bool {
	switch k {
	case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_LONG,
		gomysql.MYSQL_TYPE_LONGLONG, gomysql.MYSQL_TYPE_NEWDECIMAL, gomysql.MYSQL_TYPE_FLOAT, gomysql.MYSQL_TYPE_DOUBLE:
		return true
	}
	return false
}

// isDateKind reports the kinds that can hold MySQL zero dates.
func isDateKind(k byte) bool {
	return k == gomysql.MYSQL_TYPE_DATE || k == gomysql.MYSQL_TYPE_DATETIME || k == gomysql.MYSQL_TYPE_TIMESTAMP
}

// buildTable makes the record-model table of a description. Under the
// zero-date policy "null" date columns are nullable whatever they declare,
// because a zero date arrives as NULL.
func buildTable(id pipeline.TableID, descs []colDesc, generation int, zeroDatesNull bool) *pipeline.Table {
	// The preflight requires binlog_row_image FULL: a before image carries
	// every column (the decoder reads a column a session left out as NULL).
	t := &pipeline.Table{ID: id, Generation: generation, Columns: make([]pipeline.Column, len(descs)), FullBefore: true}
	keys := make([]int, 0, 2)
	for i := range descs {
		t.Columns[i] = descs[i].column()
		if zeroDatesNull && isDateKind(descs[i].kind) {
			t.Columns[i].Nullable = true
		}
		if descs[i].keyPos > 0 {
			keys = append(keys, i)
		}
	}
	sort.Slice(keys, func(a, b int) bool { return descs[keys[a]].keyPos < descs[keys[b]].keyPos })
	t.KeyIdx = keys
	return t
}

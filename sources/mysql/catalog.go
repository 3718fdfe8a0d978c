package mysql

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// catalogKinds maps information_schema DATA_TYPE to the binlog's kinds.
var catalogKinds = map[string]byte{
	"tinyint": gomysql.MYSQL_TYPE_TINY, "smallint": gomysql.MYSQL_TYPE_SHORT, "mediumint": gomysql.MYSQL_TYPE_INT24,
	"int": gomysql.MYSQL_TYPE_LONG, "integer": gomysql.MYSQL_TYPE_LONG, "bigint": gomysql.MYSQL_TYPE_LONGLONG,
	"decimal": gomysql.MYSQL_TYPE_NEWDECIMAL, "numeric": gomysql.MYSQL_TYPE_NEWDECIMAL,
	"float": gomysql.MYSQL_TYPE_FLOAT, "double": gomysql.MYSQL_TYPE_DOUBLE, "real": gomysql.MYSQL_TYPE_DOUBLE,
	"bit": gomysql.MYSQL_TYPE_BIT, "year": gomysql.MYSQL_TYPE_YEAR, "date": gomysql.MYSQL_TYPE_DATE,
	"datetime": gomysql.MYSQL_TYPE_DATETIME, "timestamp": gomysql.MYSQL_TYPE_TIMESTAMP, "time": gomysql.MYSQL_TYPE_TIME,
	"char": gomysql.MYSQL_TYPE_STRING, "binary": gomysql.MYSQL_TYPE_STRING,
	"varchar": gomysql.MYSQL_TYPE_VARCHAR, "varbinary": gomysql.MYSQL_TYPE_VARCHAR,
	"tinytext": gomysql.MYSQL_TYPE_BLOB, "text": gomysql.MYSQL_TYPE_BLOB, "mediumtext": gomysql.MYSQL_TYPE_BLOB,
	"longtext": gomysql.MYSQL_TYPE_BLOB, "tinyblob": gomysql.MYSQL_TYPE_BLOB, "blob": gomysql.MYSQL_TYPE_BLOB,
	"mediumblob": gomysql.MYSQL_TYPE_BLOB, "longblob": gomysql.MYSQL_TYPE_BLOB,
	"enum": gomysql.MYSQL_TYPE_ENUM, "set": gomysql.MYSQL_TYPE_SET, "json": gomysql.MYSQL_TYPE_JSON,
	"geometry": gomysql.MYSQL_TYPE_GEOMETRY, "point": gomysql.MYSQL_TYPE_GEOMETRY, "linestring": gomysql.MYSQL_TYPE_GEOMETRY,
	"polygon": gomysql.MYSQL_TYPE_GEOMETRY, "multipoint": gomysql.MYSQL_TYPE_GEOMETRY,
	"multilinestring": gomysql.MYSQL_TYPE_GEOMETRY, "multipolygon": gomysql.MYSQL_TYPE_GEOMETRY,
	"geometrycollection": gomysql.MYSQL_TYPE_GEOMETRY, "geomcollection": gomysql.MYSQL_TYPE_GEOMETRY,
}

// errNoColumns: the table is missing, or the user may see none of its
// columns.
var errNoColumns = errors.New("no such table, or no columns visible to this user")

// catalogDescs describes a table's columns from information_schema, the
// same way shapes.descs reads them from a TABLE_MAP event: the snapshot
// reads with these, the stream with the binlog's, and the two agree for an
// unchanged table.
func catalogDescs(c *client.Conn, db, table string) ([]colDesc, error) {
	r, err := c.Execute(`SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IFNULL(CHARACTER_MAXIMUM_LENGTH, 0),
		IFNULL(NUMERIC_PRECISION, 0), IFNULL(NUMERIC_SCALE, 0), IFNULL(DATETIME_PRECISION, 0),
		IFNULL(CHARACTER_SET_NAME, ''), IFNULL(COLLATION_NAME, ''), IS_NULLABLE
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, db, table)
	if err != nil {
		return nil, fmt.Errorf("mysql source: read the columns of %s.%s: %w", db, table, err)
	}
	defer r.Close()
	if len(r.Values) == 0 {
		return nil, fmt.Errorf("mysql source: table %s.%s: %w", db, table, errNoColumns)
	}
	out := make([]colDesc, len(r.Values))
	for i := range r.Values {
		d := &out[i]
		str := func(col int) string { s, _ := getString(r, i, col); return s }
		num := func(col int) int { n, _ := r.GetInt(i, col); return int(n) }
		d.name = str(0)
		dataType, colType := strings.ToLower(str(1)), strings.ToLower(str(2))
		kind, ok := catalogKinds[dataType]
		if !ok {
			return nil, fmt.Errorf("mysql source: column %s.%s.%s has type %s, which the source does not capture", db, table, d.name, colType)
		}
		d.kind = kind
		d.unsigned = signable(kind) && strings.Contains(colType, "unsigned")
		d.nullable = strings.EqualFold(str(9), "YES")
		charset, collation := strings.ToLower(str(7)), strings.ToLower(str(8))
		switch kind {
		case gomysql.MYSQL_TYPE_STRING, gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_BLOB:
			d.binary = charset == "" || collation == "binary"
			d.charset = charset
			if d.binary {
				d.charset = "binary"
			}
			if kind != gomysql.MYSQL_TYPE_BLOB {
				d.length = num(3)
			}
		case gomysql.MYSQL_TYPE_ENUM, gomysql.MYSQL_TYPE_SET:
			d.charset = charset
			d.labels, err = parseLabels(str(2))
			if err != nil {
				return nil, fmt.Errorf("mysql source: column %s.%s.%s: %w", db, table, d.name, err)
			}
		case gomysql.MYSQL_TYPE_NEWDECIMAL:
			d.precision, d.scale = num(4), num(5)
		case gomysql.MYSQL_TYPE_BIT:
			d.length = num(4)
		case gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_TIMESTAMP, gomysql.MYSQL_TYPE_TIME:
			d.scale = num(6)
		}
	}
	// MariaDB's JSON is LONGTEXT with a json_valid(col) check named after
	// the column; MySQL's JSON is its own type (DATA_TYPE json above).
	if checks, err := c.Execute(`SELECT CONSTRAINT_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS
		WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?`, db, table); err == nil {
		for i := range checks.Values {
			name, _ := getString(checks, i, 0)
			clause, _ := getString(checks, i, 1)
			for j := range out {
				if out[j].name == name && isJSONCheck(clause, name) && out[j].kind == gomysql.MYSQL_TYPE_BLOB && !out[j].binary {
					out[j].kind, out[j].charset = gomysql.MYSQL_TYPE_JSON, ""
				}
			}
		}
		checks.Close()
	}
	keys, err := c.Execute("SHOW KEYS FROM " + quoteIdent(db) + "." + quoteIdent(table) + " WHERE Key_name = 'PRIMARY'")
	if err != nil {
		return nil, fmt.Errorf("mysql source: read the primary key of %s.%s: %w", db, table, err)
	}
	defer keys.Close()
	for i := range keys.Values {
		col, _ := getStringByName(keys, i, "Column_name")
		seq, _ := keys.GetIntByName(i, "Seq_in_index")
		for j := range out {
			if out[j].name == col {
				out[j].keyPos = int(seq)
			}
		}
	}
	return out, nil
}

// isJSONCheck reports MariaDB's json_valid(`col`) check of a JSON column.
func isJSONCheck(clause, col string) bool {
	c := strings.ToLower(strings.ReplaceAll(clause, " ", ""))
	return c == "json_valid(`"+strings.ToLower(strings.ReplaceAll(col, "`", "``"))+"`)"
}

// parseLabels reads the labels of "enum('a','b”c')" or "set(…)".
func parseLabels(colType string) ([]string, error) {
	open, end := strings.IndexByte(colType, '('), strings.LastIndexByte(colType, ')')
	if open < 0 || end < open {
		return nil, fmt.Errorf("cannot read the labels of %q", colType)
	}
	s := colType[open+1 : end]
	var out []string
	for i := 0; i < len(s); {
		if s[i] != '\'' {
			i++
			continue
		}
		var b strings.Builder
		i++
		for i < len(s) {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i += 2
					continue
				}
				i++
				break
			}
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			b.WriteByte(s[i])
			i++
		}
		out = append(out, b.String())
	}
	return out, nil
}

package mysql

import (
	"strings"
)

// ddlKind is what a statement logged as a QUERY event does to tables.
type ddlKind uint8

const (
	ddlOther    ddlKind = iota // not about table contents or shapes (GRANT, CREATE USER, SAVEPOINT, …)
	ddlAlter                   // ALTER TABLE, CREATE/DROP INDEX: the next TABLE_MAP shows the new shape
	ddlCreate                  // CREATE TABLE
	ddlReplace                 // CREATE OR REPLACE TABLE: the old rows are gone
	ddlTruncate                // TRUNCATE TABLE
	ddlDrop                    // DROP TABLE
	ddlRename                  // RENAME TABLE a TO b / ALTER TABLE a RENAME TO b
	ddlUnknown                 // a statement the classifier cannot read
	ddlRows                    // a row change written as a statement (binlog_format STATEMENT or MIXED)
)

// tableName is a possibly qualified table name from a statement.
type tableName struct{ db, table string }

// ddl is a classified statement: Tables are those it changes (for renames,
// the old names; Renamed the new ones, aligned).
type ddl struct {
	Kind    ddlKind
	Tables  []tableName
	Renamed []tableName
	// Temporary marks CREATE/DROP TEMPORARY TABLE: a session's own table,
	// which may shadow a captured one of the same name but changes none.
	Temporary bool
	// Database is the database a DROP DATABASE drops (Tables empty).
	Database string
}

// classifyDDL reads a statement from a QUERY event. Row events carry their
// own schema (see shape), so the source needs from a DDL only which tables
// it empties (TRUNCATE, CREATE OR REPLACE), drops or renames. defaultDB is
// the event's current database, for unqualified names.
func classifyDDL(sql, defaultDB string) ddl {
	t := tokenize(sql)
	q := func(n tableName) tableName {
		if n.db == "" {
			n.db = defaultDB
		}
		return n
	}
	if len(t.words) == 0 {
		return ddl{Kind: ddlOther}
	}
	t.i = 1
	switch t.upper(0) {
	case "SET":
		// MariaDB: SET STATEMENT var=value[, …] FOR <statement>.
		if t.upper(1) == "STATEMENT" {
			for i := 2; i < len(t.words); i++ {
				if t.depth[i] == 0 && t.upper(i) == "FOR" {
					return classifyDDL(t.rest(i+1), defaultDB)
				}
			}
		}
		return ddl{Kind: ddlOther}
	case "TRUNCATE":
		t.skip("TABLE")
		if n, ok := t.name(); ok {
			return ddl{Kind: ddlTruncate, Tables: []tableName{q(n)}}
		}
	case "CREATE":
		replace := t.skip("OR") && t.skip("REPLACE")
		temp := t.skip("TEMPORARY")
		switch {
		case t.skip("TABLE"):
			t.skipIfExists()
			if n, ok := t.name(); ok {
				if replace {
					return ddl{Kind: ddlReplace, Tables: []tableName{q(n)}, Temporary: temp}
				}
				return ddl{Kind: ddlCreate, Tables: []tableName{q(n)}, Temporary: temp}
			}
		case t.findIndexOn():
			if n, ok := t.name(); ok {
				return ddl{Kind: ddlAlter, Tables: []tableName{q(n)}}
			}
		default:
			return ddl{Kind: ddlOther}
		}
	case "DROP":
		temp := t.skip("TEMPORARY")
		switch {
		case t.skip("DATABASE") || t.skip("SCHEMA"):
			t.skipIfExists()
			if n, ok := t.name(); ok && n.db == "" {
				return ddl{Kind: ddlDrop, Database: n.table}
			}
		case t.skip("TABLE") || t.skip("TABLES"):
			t.skipIfExists()
			var out []tableName
			for {
				n, ok := t.name()
				if !ok {
					break
				}
				out = append(out, q(n))
				if !t.skip(",") {
					break
				}
			}
			if len(out) > 0 {
				return ddl{Kind: ddlDrop, Tables: out, Temporary: temp}
			}
		case t.findIndexOn():
			if n, ok := t.name(); ok {
				return ddl{Kind: ddlAlter, Tables: []tableName{q(n)}}
			}
		default:
			return ddl{Kind: ddlOther}
		}
	case "ALTER":
		t.skip("ONLINE")
		t.skip("IGNORE")
		if !t.skip("TABLE") {
			return ddl{Kind: ddlOther} // ALTER DATABASE/USER/VIEW/EVENT/…
		}
		t.skipIfExists()
		n, ok := t.name()
		if !ok {
			break
		}
		// ALTER TABLE a … RENAME [TO|AS] b (at the top level of the list).
		for i := t.i; i < len(t.words); i++ {
			if t.depth[i] == 0 && strings.EqualFold(t.words[i], "RENAME") && (i+1 >= len(t.words) ||
				!isOneOf(t.words[i+1], "COLUMN", "INDEX", "KEY", "CONSTRAINT")) {
				t.i = i + 1
				if !t.skip("TO") {
					t.skip("AS")
				}
				if to, ok := t.name(); ok {
					return ddl{Kind: ddlRename, Tables: []tableName{q(n)}, Renamed: []tableName{q(to)}}
				}
				return ddl{Kind: ddlUnknown, Tables: []tableName{q(n)}}
			}
		}
		return ddl{Kind: ddlAlter, Tables: []tableName{q(n)}}
	case "RENAME":
		if !t.skip("TABLE") && !t.skip("TABLES") {
			return ddl{Kind: ddlOther} // RENAME USER
		}
		var from, to []tableName
		for {
			a, ok := t.name()
			if !ok || !t.skip("TO") {
				return ddl{Kind: ddlUnknown}
			}
			b, ok := t.name()
			if !ok {
				return ddl{Kind: ddlUnknown}
			}
			from, to = append(from, q(a)), append(to, q(b))
			if !t.skip(",") {
				break
			}
		}
		return ddl{Kind: ddlRename, Tables: from, Renamed: to}
	case "INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD":
		return ddl{Kind: ddlRows}
	case "GRANT", "REVOKE", "SAVEPOINT", "ROLLBACK", "RELEASE", "XA", "FLUSH", "ANALYZE", "OPTIMIZE", "REPAIR",
		"CHECK", "INSTALL", "UNINSTALL", "DO", "BEGIN", "COMMIT":
		return ddl{Kind: ddlOther}
	}
	return ddl{Kind: ddlUnknown}
}

// mentions reports whether sql names table (qualified or not) as a word:
// the fallback for statements the classifier cannot read.
func mentions(sql, defaultDB string, table tableName) bool {
	t := tokenize(sql)
	for i, w := range t.words {
		if !strings.EqualFold(w, table.table) && !(t.quoted[i] && w == table.table) {
			continue
		}
		if i >= 2 && t.words[i-1] == "." && !t.quoted[i-1] {
			if strings.EqualFold(t.words[i-2], table.db) {
				return true
			}
			continue
		}
		if strings.EqualFold(defaultDB, table.db) || defaultDB == "" {
			return true
		}
	}
	return false
}

func isOneOf(w string, set ...string) bool {
	for _, s := range set {
		if strings.EqualFold(w, s) {
			return true
		}
	}
	return false
}

// tokens is a statement split into words: identifiers and keywords
// (backquotes removed), string literals, and punctuation, with comments
// dropped and MySQL's executable comments /*! … */ kept as code.
type tokens struct {
	sql    string
	starts []int // byte offset of each word in sql
	words  []string
	quoted []bool // the word was a `quoted` identifier
	depth  []int  // parenthesis depth of each word
	i      int
}

func tokenize(sql string) *tokens {
	t := &tokens{sql: sql}
	depth := 0
	var at int
	add := func(w string, quoted bool) {
		t.starts = append(t.starts, at)
		t.words = append(t.words, w)
		t.quoted = append(t.quoted, quoted)
		t.depth = append(t.depth, depth)
	}
	s := sql
	for i := 0; i < len(s); {
		c := s[i]
		at = i
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#' || (c == '-' && strings.HasPrefix(s[i:], "-- ")):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*!") || strings.HasPrefix(s[i:], "/*M!"):
			i += 3
			if s[i-1] == 'M' || (i < len(s) && s[i] == '!') {
				i++
			}
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
		case strings.HasPrefix(s[i:], "*/"):
			i += 2 // the end of an executable comment
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				i = len(s)
			} else {
				i += end + 4
			}
		case c == '`':
			var b strings.Builder
			i++
			for i < len(s) {
				if s[i] == '`' {
					if i+1 < len(s) && s[i+1] == '`' {
						b.WriteByte('`')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(s[i])
				i++
			}
			add(b.String(), true)
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			add(s[i:min(j+1, len(s))], false)
			i = j + 1
		case c == '(':
			add("(", false)
			depth++
			i++
		case c == ')':
			depth--
			add(")", false)
			i++
		case isWordByte(c):
			j := i
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			add(s[i:j], false)
			i = j
		default:
			add(s[i:i+1], false)
			i++
		}
	}
	return t
}

// rest is the statement text from word i on.
func (t *tokens) rest(i int) string {
	if i >= len(t.words) {
		return ""
	}
	return t.sql[t.starts[i]:]
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func (t *tokens) upper(i int) string {
	if i < len(t.words) && !t.quoted[i] {
		return strings.ToUpper(t.words[i])
	}
	return ""
}

// skip consumes the keyword w when it comes next.
func (t *tokens) skip(w string) bool {
	if t.i < len(t.words) && !t.quoted[t.i] && strings.EqualFold(t.words[t.i], w) {
		t.i++
		return true
	}
	return false
}

func (t *tokens) skipIfExists() {
	save := t.i
	if t.skip("IF") && (t.skip("EXISTS") || (t.skip("NOT") && t.skip("EXISTS"))) {
		return
	}
	t.i = save
}

// findIndexOn moves past "[UNIQUE|FULLTEXT|SPATIAL] INDEX name … ON".
func (t *tokens) findIndexOn() bool {
	save := t.i
	t.skip("UNIQUE")
	t.skip("FULLTEXT")
	t.skip("SPATIAL")
	if !t.skip("INDEX") {
		t.i = save
		return false
	}
	for ; t.i < len(t.words); t.i++ {
		if t.upper(t.i) == "ON" {
			t.i++
			return true
		}
	}
	return false
}

// name reads [db.]table.
func (t *tokens) name() (tableName, bool) {
	if t.i >= len(t.words) || !isName(t, t.i) {
		return tableName{}, false
	}
	first := t.words[t.i]
	t.i++
	if t.i+1 < len(t.words) && t.words[t.i] == "." && !t.quoted[t.i] && isName(t, t.i+1) {
		second := t.words[t.i+1]
		t.i += 2
		return tableName{db: first, table: second}, true
	}
	return tableName{table: first}, true
}

func isName(t *tokens, i int) bool {
	if t.quoted[i] {
		return true
	}
	w := t.words[i]
	return w != "" && isWordByte(w[0]) && w[0] != '\'' && w[0] != '"'
}

// cascades reports whether a statement declares a foreign key with a
// cascading action: ON DELETE or ON UPDATE followed by CASCADE, SET NULL
// or SET DEFAULT (checkCascades).
func cascades(sql string) bool {
	t := tokenize(sql)
	for i := 0; i+2 < len(t.words); i++ {
		if t.upper(i) != "ON" || t.upper(i+1) != "DELETE" && t.upper(i+1) != "UPDATE" {
			continue
		}
		switch t.upper(i + 2) {
		case "CASCADE":
			return true
		case "SET":
			if w := t.upper(i + 3); w == "NULL" || w == "DEFAULT" {
				return true
			}
		}
	}
	return false
}

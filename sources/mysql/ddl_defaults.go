package mysql

import (
	"strings"
)

// A column added with a DEFAULT gives every existing row that value, with
// no row event saying so (MariaDB adds it in place). The sinks fill those
// rows from the column's missing value (pipeline.Column.Missing), which the
// binlog's TABLE_MAP cannot carry: the source reads it from the ALTER
// statement itself, which is the value at the ALTER's time (a later ALTER
// … SET DEFAULT does not change rows that already exist).

// defaultLit is the DEFAULT of one added column as the statement spells
// it: a literal (text, with quoted telling a string from a number or a
// keyword) or, when constant is false, an expression the source does not
// evaluate (CURRENT_TIMESTAMP, (expr), …).
type defaultLit struct {
	text     string
	quoted   bool
	null     bool
	constant bool
	// introducer is the charset of a _charset'…' string: its bytes are
	// text in that charset.
	introducer string
}

// alterSpecs returns an ALTER TABLE statement's tokens and its
// specifications: the top-level comma-separated clauses, as word ranges
// [from, to). Statements other than ALTER TABLE give nil.
func alterSpecs(sql string) (*tokens, [][2]int) {
	t := tokenize(sql)
	if t.upper(0) == "SET" && t.upper(1) == "STATEMENT" {
		for i := 2; i < len(t.words); i++ {
			if t.depth[i] == 0 && t.upper(i) == "FOR" {
				return alterSpecs(t.rest(i + 1))
			}
		}
		return nil, nil
	}
	t.i = 1
	if t.upper(0) != "ALTER" {
		return nil, nil
	}
	t.skip("ONLINE")
	t.skip("IGNORE")
	if !t.skip("TABLE") {
		return nil, nil
	}
	t.skipIfExists()
	if _, ok := t.name(); !ok {
		return nil, nil
	}
	var specs [][2]int
	for start := t.i; start < len(t.words); {
		end := start
		for end < len(t.words) && !(t.depth[end] == 0 && t.words[end] == "," && !t.quoted[end]) {
			end++
		}
		specs = append(specs, [2]int{start, end})
		start = end + 1
	}
	return t, specs
}

// addedColumns returns the columns an ALTER TABLE statement adds, by name,
// with their DEFAULT (a column added without one maps to a NULL literal:
// existing rows read NULL; an AUTO_INCREMENT or generated column to a
// value that is not constant). Statements other than ALTER TABLE give nil.
func addedColumns(sql string) map[string]defaultLit {
	t, specs := alterSpecs(sql)
	var out map[string]defaultLit
	add := func(name string, lit defaultLit) {
		if out == nil {
			out = map[string]defaultLit{}
		}
		out[name] = lit
	}
	for _, sp := range specs {
		parseAdd(t, sp[0], sp[1], add)
	}
	return out
}

// rewritesRows reports whether an ALTER TABLE statement may change the
// values existing rows hold with no row event for them: it changes a
// column's type or character set (MODIFY, CHANGE, CONVERT TO), renames a
// column (the sinks hold its values under the old name), or adds a
// column whose value the source does not evaluate (added, from
// addedColumns: a DEFAULT such as CURRENT_TIMESTAMP or (UUID()), an
// AUTO_INCREMENT or a generated column). The snapshot engine then
// reads the table again (pipeline.OpRewrite).
func rewritesRows(sql string, added map[string]defaultLit) bool {
	for _, lit := range added {
		if !lit.null && !lit.constant {
			return true
		}
	}
	t, specs := alterSpecs(sql)
	for _, sp := range specs {
		switch t.upper(sp[0]) {
		case "MODIFY", "CHANGE", "CONVERT":
			return true
		case "RENAME":
			// RENAME COLUMN a TO b: the rows' values move to a column
			// the sinks never held a value of.
			if t.upper(sp[0]+1) == "COLUMN" {
				return true
			}
		}
	}
	return false
}

// parseAdd reads one specification, words [from, to), when it adds
// columns.
func parseAdd(t *tokens, from, to int, add func(string, defaultLit)) {
	i := from
	if t.upper(i) != "ADD" {
		return
	}
	i++
	if t.upper(i) == "COLUMN" {
		i++
	}
	if t.upper(i) == "IF" && t.upper(i+1) == "NOT" && t.upper(i+2) == "EXISTS" {
		i += 3
	}
	if i >= to {
		return
	}
	if t.words[i] == "(" && !t.quoted[i] {
		// ADD [COLUMN] (col def, col def, …)
		depth := t.depth[i] + 1
		for j := i + 1; j < to; {
			end := j
			for end < to && !(t.depth[end] == depth && (t.words[end] == "," || t.words[end] == ")") && !t.quoted[end]) {
				end++
			}
			columnDef(t, j, end, add)
			j = end + 1
		}
		return
	}
	if isOneOf(t.upper(i), "INDEX", "KEY", "CONSTRAINT", "PRIMARY", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN",
		"PERIOD", "SYSTEM", "CHECK", "PARTITION") {
		return
	}
	columnDef(t, i, to, add)
}

// columnDef reads "name type … [DEFAULT value] …" from words [from, to).
func columnDef(t *tokens, from, to int, add func(string, defaultLit)) {
	if from >= to || !isName(t, from) {
		return
	}
	name := t.words[from]
	depth := t.depth[from]
	lit := defaultLit{null: true, constant: true}
	seen := false // a DEFAULT was read
	for i := from + 1; i < to; i++ {
		if t.depth[i] != depth || t.quoted[i] {
			continue
		}
		switch w := t.upper(i); {
		case w == "AUTO_INCREMENT" || w == "GENERATED" || w == "AS" && i+1 < to && t.words[i+1] == "(":
			// A value per existing row (a sequence, a generated column's
			// expression) that no statement spells.
			add(name, defaultLit{})
			return
		case w == "DEFAULT" && i+1 < to && !seen:
			lit, seen = literalAt(t, i+1, to), true
		}
	}
	add(name, lit)
}

// literalAt reads the DEFAULT value starting at word i.
func literalAt(t *tokens, i, to int) defaultLit {
	w := t.words[i]
	if t.quoted[i] {
		return defaultLit{} // a `quoted` identifier: not a value
	}
	// A charset introducer (_utf8mb4'…') or N'…' before a string.
	introducer := ""
	if (strings.HasPrefix(w, "_") || strings.EqualFold(w, "N")) && i+1 < to && isStringToken(t.words[i+1]) && t.starts[i+1] == t.starts[i]+len(w) {
		if w[0] == '_' {
			introducer = strings.ToLower(w[1:])
		}
		i++
		w = t.words[i]
	}
	switch {
	case isStringToken(w):
		// 'a''b' reaches here as two touching tokens (a doubled quote);
		// 'a' 'b', apart, is a concatenation.
		raw := []string{w}
		for i+1 < to && isStringToken(t.words[i+1]) && !t.quoted[i+1] {
			if t.starts[i+1] == t.starts[i]+len(t.words[i]) {
				raw[len(raw)-1] += t.words[i+1]
			} else {
				raw = append(raw, t.words[i+1])
			}
			i++
		}
		var text strings.Builder
		for _, r := range raw {
			text.WriteString(unquoteSQL(r))
		}
		return defaultLit{text: text.String(), quoted: true, constant: true, introducer: introducer}
	case strings.EqualFold(w, "NULL"):
		return defaultLit{null: true, constant: true}
	case strings.EqualFold(w, "TRUE"):
		return defaultLit{text: "1", constant: true}
	case strings.EqualFold(w, "FALSE"):
		return defaultLit{text: "0", constant: true}
	case w == "-" || w == "+" || w == "." || w[0] >= '0' && w[0] <= '9':
		// A number: the statement's own characters up to the first one
		// that cannot be part of it.
		s := t.sql[t.starts[i]:]
		n := 0
		for n < len(s) && strings.IndexByte("+-.0123456789eE", s[n]) >= 0 {
			n++
		}
		num := s[:n]
		if rest := strings.TrimLeft(s[n:], " \t\r\n"); rest != "" && !endsLiteral(rest) {
			return defaultLit{} // an expression such as 1 + 1
		}
		return defaultLit{text: num, constant: num != "" && num != "-" && num != "+"}
	}
	return defaultLit{} // an expression or a function
}

// endsLiteral reports whether what follows a number ends the DEFAULT (the
// next attribute of the column, or the end of the definition).
func endsLiteral(rest string) bool {
	switch rest[0] {
	case ',', ')', ';':
		return true
	}
	w := strings.ToUpper(firstWord(rest))
	return isOneOf(w, "NOT", "NULL", "COMMENT", "FIRST", "AFTER", "ON", "CHECK", "PRIMARY", "UNIQUE", "KEY",
		"COLLATE", "CHARACTER", "CHARSET", "INVISIBLE", "REFERENCES", "AUTO_INCREMENT", "CONSTRAINT", "GENERATED",
		"COLUMN_FORMAT", "STORAGE", "WITH", "WITHOUT", "VISIBLE", "COMPRESSED", "PERSISTENT", "VIRTUAL", "STORED")
}

func isStringToken(w string) bool {
	return len(w) >= 2 && (w[0] == '\'' || w[0] == '"') && w[len(w)-1] == w[0]
}

// unquoteSQL undoes a string literal's quoting: a doubled quote and the
// backslash escapes of the default sql_mode (without NO_BACKSLASH_ESCAPES).
func unquoteSQL(w string) string {
	q := w[0]
	body := w[1 : len(w)-1]
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == q && i+1 < len(body) && body[i+1] == q:
			b.WriteByte(q)
			i++
		case c == '\\' && i+1 < len(body):
			i++
			switch body[i] {
			case '0':
				b.WriteByte(0)
			case 'b':
				b.WriteByte('\b')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'Z':
				b.WriteByte(26)
			case '%', '_':
				// Kept with their backslash (LIKE patterns).
				b.WriteByte('\\')
				b.WriteByte(body[i])
			default:
				b.WriteByte(body[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

package config

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// Environment interpolation.
//
// Scalar values (never mapping keys) may reference environment variables:
//
//	${NAME}           the variable's value; an error when it is not set
//	${NAME:-default}  default when NAME is unset or empty
//	${NAME-default}   default when NAME is unset
//	$$                a literal $ (a lone $ not followed by { is kept as is)
//
// Interpolation runs on the node tree before decoding, so the decoder sees
// the final text. Nodes that received interpolated text are remembered and
// their values are never quoted in error messages (they may be secrets).

// interpolate expands variable references in every scalar value below n.
func (d *decoder) interpolate(path string, n *yaml.Node, lookup func(string) (string, bool)) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			d.interpolate(path, c, lookup)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			d.interpolate(join(path, n.Content[i].Value), n.Content[i+1], lookup)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.interpolate(index(path, i), c, lookup)
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "$") {
			return
		}
		out, vars, ok := d.expand(path, n, lookup)
		if !ok {
			d.broken[n] = true
			return
		}
		n.Value = out
		if len(vars) > 0 {
			d.interp[n] = vars
		}
	}
}

// expand substitutes the references in n.Value. It reports problems itself
// and returns ok=false when there were any.
func (d *decoder) expand(path string, n *yaml.Node, lookup func(string) (string, bool)) (string, []string, bool) {
	s := n.Value
	var b strings.Builder
	var vars []string
	ok := true
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' || i+1 >= len(s) || (s[i+1] != '$' && s[i+1] != '{') {
			b.WriteByte(c)
			i++
			continue
		}
		if s[i+1] == '$' {
			b.WriteByte('$')
			i += 2
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			d.errorf(n, path, "unterminated variable reference", "close it with }, or write $$ for a literal $")
			return "", nil, false
		}
		ref := s[i+2 : i+2+end]
		i += 2 + end + 1
		name, def, mode := ref, "", ""
		if k := strings.Index(ref, ":-"); k >= 0 && validVarName(ref[:k]) {
			name, def, mode = ref[:k], ref[k+2:], ":-"
		} else if k := strings.IndexByte(ref, '-'); k >= 0 && validVarName(ref[:k]) {
			name, def, mode = ref[:k], ref[k+1:], "-"
		}
		if !validVarName(name) {
			d.errorf(n, path, "malformed variable reference",
				"use ${NAME}, ${NAME:-default} or ${NAME-default} with NAME made of letters, digits and _; write $$ for a literal $")
			ok = false
			continue
		}
		vars = append(vars, name)
		val, set := lookup(name)
		switch {
		case mode == ":-" && (!set || val == ""):
			val = def
		case mode == "-" && !set:
			val = def
		case !set:
			d.errorf(n, path, "environment variable "+name+" is not set",
				"export "+name+" before starting sluice, or give a default with ${"+name+":-default}")
			ok = false
			continue
		}
		b.WriteString(val)
	}
	return b.String(), vars, ok
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

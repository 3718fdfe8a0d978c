package eval

import (
	"fmt"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
)

// Idioms: expressions written often enough in transforms that evaluating
// them as written costs more than their result is worth. Each is rewritten
// before the type check into a call of a function that gives the same
// value, and the same error, without the intermediate values.
//
// split(s, sep)[i] (an e-mail's domain, a path's segment) builds every
// part, boxes the slice and fetches one element by reflection: four
// allocations for one substring. It becomes __split_part(s, sep, i).

// idioms is the patcher that rewrites them.
type idioms struct{}

func (idioms) Visit(node *ast.Node) {
	m, ok := (*node).(*ast.MemberNode)
	if !ok || m.Optional {
		return
	}
	call, ok := m.Node.(*ast.BuiltinNode)
	if !ok || call.Name != "split" || len(call.Arguments) != 2 {
		return
	}
	i, ok := constInt(m.Property)
	if !ok {
		return
	}
	part := &ast.CallNode{Callee: &ast.IdentifierNode{Value: "__split_part"},
		Arguments: []ast.Node{call.Arguments[0], call.Arguments[1], &ast.IntegerNode{Value: i}}}
	ast.Patch(node, part)
}

// constInt reads an integer constant, negated or not.
func constInt(n ast.Node) (int, bool) {
	switch x := n.(type) {
	case *ast.IntegerNode:
		return x.Value, true
	case *ast.UnaryNode:
		if v, ok := x.Node.(*ast.IntegerNode); ok && x.Operator == "-" {
			return -v.Value, true
		}
	}
	return 0, false
}

// idiomFunctions declares the functions the idioms become.
func idiomFunctions() []expr.Option {
	return []expr.Option{
		expr.Function("__split_part", func(args ...any) (any, error) {
			return splitPart(args[0].(string), args[1].(string), args[2].(int))
		}, new(func(string, string, int) string)),
	}
}

// splitPart is strings.Split(s, sep)[i] (i < 0 counts from the end, as
// expr's indexing does), with expr's error for an index out of range.
func splitPart(s, sep string, i int) (string, error) {
	if sep == "" {
		// Split into UTF-8 sequences: rare, done as written.
		parts := strings.Split(s, sep)
		if i < 0 {
			i += len(parts)
		}
		if i < 0 || i >= len(parts) {
			return "", fmt.Errorf("index out of range: %d (array length is %d)", i, len(parts))
		}
		return parts[i], nil
	}
	n := strings.Count(s, sep) + 1
	if i < 0 {
		i += n
	}
	if i < 0 || i >= n {
		return "", fmt.Errorf("index out of range: %d (array length is %d)", i, n)
	}
	for ; i > 0; i-- {
		s = s[strings.Index(s, sep)+len(sep):]
	}
	if k := strings.Index(s, sep); k >= 0 {
		s = s[:k]
	}
	return s, nil
}

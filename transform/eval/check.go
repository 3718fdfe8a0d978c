package eval

import (
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
)

// functions of our own beside expr's builtins.
var ownFunctions = map[string]bool{"decimal": true, "decimal_round": true, "decimal_float": true}

// Check parses src without a table shape and reports a syntax error or a
// call of an unknown function (an *Error), so a config is refused before
// the source is read; Compile checks the columns and types once the
// shape is known.
func Check(src string) error {
	tree, err := parser.Parse(src)
	if err != nil {
		return compileErr(src, err)
	}
	f := &calls{}
	ast.Walk(&tree.Node, f)
	if f.err != nil {
		return f.err.bind(src)
	}
	return nil
}

type calls struct{ err *posErr }

func (c *calls) Visit(node *ast.Node) {
	call, ok := (*node).(*ast.CallNode)
	if !ok || c.err != nil {
		return
	}
	if id, ok := call.Callee.(*ast.IdentifierNode); ok && !ownFunctions[id.Value] {
		c.err = &posErr{loc: id.Location(), msg: "unknown function " + id.Value + " (the functions: expr's builtins, decimal, decimal_round, decimal_float)"}
	}
}

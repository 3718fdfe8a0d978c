// Package eval compiles the expressions of the transforms (filter, compute,
// route) with expr-lang/expr and runs them over change records.
//
// An expression is compiled once per table shape (Compile): it sees
//
//	op           string     "c", "u", "d" or "r"
//	schema       string     the record's schema (a MySQL database)
//	table        string     the record's table name
//	commit_time  time.Time  the source commit time (the snapshot time for reads)
//	before.<col> / after.<col>   a column of the old / new row image
//
// and every column is typed as the shape declares it (Types), so an
// unknown column, a type mismatch or an unknown function is a compile
// error at the expression's line and column, never a surprise at run
// time. Decimals stay exact (pipeline.Decimal, with + - * / and the
// comparisons overloaded; decimal.go) and timestamps are time.Time.
//
// NULL reads as nil: `after.email == nil` tests it, `after.email ?? ""`
// gives a default, and an equality with a NULL column is false. Any other
// operation on a NULL is a run-time error that names the column. A column
// whose value the change does not carry (Postgres unchanged TOAST under
// REPLICA IDENTITY DEFAULT) is a run-time error too, never a silent NULL.
package eval

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/checker"
	"github.com/expr-lang/expr/compiler"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/optimizer"
	"github.com/expr-lang/expr/vm"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Error is a compile error, positioned in the expression's text (1-based
// line and column).
type Error struct {
	Line, Col int
	Msg       string
}

func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg) }

// Program is an expression compiled for one table shape. It is not safe
// for concurrent use: each operator runs its programs from one goroutine.
type Program struct {
	src   string
	prog  *vm.Program
	vm    vm.VM
	st    *state
	out   reflect.Type
	table *pipeline.Table
	refs  []colRef
}

// state is what the accessor functions of a program read: the record
// being evaluated.
type state struct {
	rec *pipeline.Record
}

// colRef is a column an expression reads.
type colRef struct {
	after bool
	idx   int
}

func (c colRef) image() string {
	if c.after {
		return "after"
	}
	return "before"
}

// Out is the static type of the expression's result (an interface type
// when only the run time knows it).
func (p *Program) Out() reflect.Type { return p.out }

// Text is the expression as written.
func (p *Program) Text() string { return p.src }

// Eval runs the program over r (whose Table must be the shape the program
// was compiled for). A run-time error names the NULL or missing column
// that caused it when one did.
func (p *Program) Eval(r *pipeline.Record) (any, error) {
	p.st.rec = r
	v, err := p.vm.Run(p.prog, nil)
	p.st.rec = nil
	if err != nil {
		return nil, p.runtimeErr(r, err)
	}
	return v, nil
}

// Bool runs a program whose result is a bool (a predicate); nil (a NULL
// result) is false.
func (p *Program) Bool(r *pipeline.Record) (bool, error) {
	v, err := p.Eval(r)
	if err != nil {
		return false, err
	}
	switch b := v.(type) {
	case bool:
		return b, nil
	case nil:
		return false, nil
	}
	return false, fmt.Errorf("expression %q gave %T, want bool", p.src, v)
}

// runtimeErr describes a failed run: the expression, the place, and the
// NULL columns it read.
func (p *Program) runtimeErr(r *pipeline.Record, err error) error {
	var ve *valueError
	if errors.As(err, &ve) {
		return fmt.Errorf("expression %q: %w", p.src, ve)
	}
	msg := err.Error()
	var fe *file.Error
	if errors.As(err, &fe) {
		msg = fmt.Sprintf("%d:%d: %s", fe.Line, fe.Column+1, fe.Message)
	}
	var nulls []string
	for _, c := range p.refs {
		img := r.Before
		if c.after {
			img = r.After
		}
		if img != nil && img[c.idx] == nil {
			nulls = append(nulls, c.image()+"."+p.table.Columns[c.idx].Name)
		}
	}
	if len(nulls) > 0 {
		msg += " (NULL: " + strings.Join(nulls, ", ") + "; test with == nil or give a default with ??)"
	}
	return fmt.Errorf("expression %q: %s", p.src, msg)
}

// Want is what an operator needs of an expression's result: nil accepts
// any type.
type Want func(reflect.Type) error

// WantBool accepts a bool (or a type only the run time knows).
func WantBool(t reflect.Type) error {
	if t.Kind() == reflect.Bool || t.Kind() == reflect.Interface {
		return nil
	}
	return fmt.Errorf("the expression gives %s, want a bool", typeName(t))
}

// Compile compiles src for records of table t and checks its result with
// want (nil: any). A compile error is an *Error.
func Compile(src string, t *pipeline.Table, want Want) (*Program, error) {
	p := &Program{src: src, st: &state{}, table: t}
	cfg := conf.CreateNew()
	opts := append(append(p.functions(), decimalOptions()...), idiomFunctions()...)
	cols := &columns{p: p}
	opts = append(opts, expr.Patch(cols), expr.Patch(idioms{}))
	for _, o := range opts {
		o(cfg)
	}
	cfg.Strict = true // an unknown name is an error, not nil
	cfg.Check()
	tree, err := checker.ParseCheck(src, cfg)
	if cols.err != nil {
		// An unknown column first: the type errors after it stem from it.
		return nil, cols.err.bind(src)
	}
	if tree != nil {
		if e := bareImages(&tree.Node); e != nil {
			return nil, e.bind(src)
		}
	}
	if err != nil {
		return nil, compileErr(src, err)
	}
	nullableEquality(&tree.Node)
	if err := optimizer.Optimize(&tree.Node, cfg); err != nil {
		return nil, compileErr(src, err)
	}
	if p.prog, err = compiler.Compile(tree, cfg); err != nil {
		return nil, compileErr(src, err)
	}
	p.out = tree.Node.Type()
	if want != nil {
		if err := want(p.out); err != nil {
			return nil, &Error{Line: 1, Col: 1, Msg: err.Error()}
		}
	}
	return p, nil
}

// goTypes names the Go types of expr's messages as the docs do.
var goTypes = strings.NewReplacer("pipeline.Decimal", "decimal", "time.Time", "time", "time.Duration", "duration",
	"[]interface {}", "array", "[]uint8", "bytes", "interface {}", "any")

// compileErr turns expr's error into an *Error.
func compileErr(src string, err error) error {
	var fe *file.Error
	if errors.As(err, &fe) {
		if fe.Line == 0 {
			fe = fe.Bind(file.NewSource(src))
		}
		return &Error{Line: max(fe.Line, 1), Col: fe.Column + 1, Msg: goTypes.Replace(fe.Message)}
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Line: 1, Col: 1, Msg: err.Error()}
}

// functions declares op, schema, table, commit_time and one accessor per
// column and image; the patcher (columns) turns references into calls of
// them. They read the record through p.st, so they take no arguments and
// a call allocates nothing.
func (p *Program) functions() []expr.Option {
	st := p.st
	opts := []expr.Option{
		expr.Function("__op", func(...any) (any, error) { return st.rec.Op.String(), nil }, new(func() string)),
		expr.Function("__schema", func(...any) (any, error) { return st.rec.Table.ID.Schema, nil }, new(func() string)),
		expr.Function("__table", func(...any) (any, error) { return st.rec.Table.ID.Table, nil }, new(func() string)),
		expr.Function("__commit_time", func(...any) (any, error) { return st.rec.EventTime, nil }, new(func() time.Time)),
	}
	for i := range p.table.Columns {
		c := &p.table.Columns[i]
		typ := reflect.FuncOf(nil, []reflect.Type{TypeOf(c)}, false)
		for _, after := range []bool{false, true} {
			ref := colRef{after: after, idx: i}
			fn := func(...any) (any, error) {
				img := st.rec.Before
				if ref.after {
					img = st.rec.After
				}
				if img == nil {
					return nil, nil
				}
				return ValueOf(c, img[ref.idx], ref.image())
			}
			opts = append(opts, expr.Function(accessor(ref), fn, reflect.New(typ).Interface()))
		}
	}
	return opts
}

func accessor(c colRef) string {
	if c.after {
		return "__a" + strconv.Itoa(c.idx)
	}
	return "__b" + strconv.Itoa(c.idx)
}

// columns rewrites before.<col> and after.<col> (and before["col"]) into
// calls of the columns' accessors, and op, schema, table and commit_time
// into calls of theirs. It runs before the type check, so an unknown
// column is reported here, at its place.
type columns struct {
	p   *Program
	err *posErr
}

var vars = map[string]string{"op": "__op", "schema": "__schema", "table": "__table", "commit_time": "__commit_time"}

func (v *columns) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.IdentifierNode:
		if fn, ok := vars[n.Value]; ok {
			ast.Patch(node, &ast.CallNode{Callee: &ast.IdentifierNode{Value: fn}})
		}
	case *ast.MemberNode:
		id, ok := n.Node.(*ast.IdentifierNode)
		if !ok || (id.Value != "before" && id.Value != "after") {
			return
		}
		prop, ok := n.Property.(*ast.StringNode)
		if !ok {
			v.fail(n.Property.Location(), "a column of "+id.Value+" is named by a constant, e.g. "+id.Value+".id")
			return
		}
		idx := -1
		for i := range v.p.table.Columns {
			if v.p.table.Columns[i].Name == prop.Value {
				idx = i
				break
			}
		}
		if idx < 0 {
			v.fail(id.Location(), UnknownColumn(v.p.table, prop.Value))
			ast.Patch(node, &ast.NilNode{})
			return
		}
		ref := colRef{after: id.Value == "after", idx: idx}
		v.p.refs = append(v.p.refs, ref)
		ast.Patch(node, &ast.CallNode{Callee: &ast.IdentifierNode{Value: accessor(ref)}})
	}
}

func (v *columns) fail(loc file.Location, msg string) {
	if v.err == nil {
		v.err = &posErr{loc: loc, msg: msg}
	}
}

// posErr is an error at a place in the expression, bound to its line and
// column once the text is known.
type posErr struct {
	loc file.Location
	msg string
}

func (e *posErr) bind(src string) *Error {
	fe := (&file.Error{Location: e.loc, Message: e.msg}).Bind(file.NewSource(src))
	return &Error{Line: fe.Line, Col: fe.Column + 1, Msg: e.msg}
}

// UnknownColumn says a column does not exist and lists the table's.
func UnknownColumn(t *pipeline.Table, name string) string {
	names := make([]string, len(t.Columns))
	for i := range t.Columns {
		names[i] = t.Columns[i].Name
		if strings.EqualFold(names[i], name) {
			return fmt.Sprintf("column %q of %s does not exist; did you mean %q?", name, t.ID, names[i])
		}
	}
	return fmt.Sprintf("column %q of %s does not exist; its columns: %s", name, t.ID, strings.Join(names, ", "))
}

// bareImages reports before or after used other than to read a column.
func bareImages(root *ast.Node) *posErr {
	f := &finder{}
	ast.Walk(root, f)
	return f.err
}

type finder struct{ err *posErr }

func (f *finder) Visit(node *ast.Node) {
	if id, ok := (*node).(*ast.IdentifierNode); ok && f.err == nil && (id.Value == "before" || id.Value == "after") {
		f.err = &posErr{loc: id.Location(), msg: id.Value + " is a row image: read one of its columns, e.g. " + id.Value + ".id (op tells inserts, updates and deletes apart)"}
	}
}

// nullableEquality makes == and != between a column and another value
// compare as any: a column may be NULL (nil), and expr's fast path for two
// strings would fail on it instead of giving false.
func nullableEquality(root *ast.Node) {
	ast.Walk(root, equalities{})
}

type equalities struct{}

func (equalities) Visit(node *ast.Node) {
	b, ok := (*node).(*ast.BinaryNode)
	if !ok || (b.Operator != "==" && b.Operator != "!=") {
		return
	}
	for _, side := range []ast.Node{b.Left, b.Right} {
		if isAccessor(side) {
			side.SetType(anyType)
		}
	}
}

var anyType = reflect.TypeFor[any]()

// isAccessor reports a call of a column accessor.
func isAccessor(n ast.Node) bool {
	c, ok := n.(*ast.CallNode)
	if !ok {
		return false
	}
	id, ok := c.Callee.(*ast.IdentifierNode)
	return ok && len(id.Value) > 3 && (strings.HasPrefix(id.Value, "__a") || strings.HasPrefix(id.Value, "__b"))
}

package config

import (
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/eval"
)

// validateRecordTransforms checks what the record transforms say without
// the source's table shapes: table patterns, expressions' syntax and
// functions, declared types, sink names, and the fields one kind needs.
// The columns and types the expressions read are checked against the
// shapes when the pipeline starts (Config.ErrorAt places those errors).
func (d *decoder) validateRecordTransforms(c *Config) {
	sinks := make([]string, len(c.Sinks))
	for i := range c.Sinks {
		sinks[i] = c.Sinks[i].Name()
	}
	for i := range c.Transforms {
		t := &c.Transforms[i]
		kind := t.Kind()
		base := index("transforms", i) + "." + kind
		if kind == "" || kind == "join" || kind == "window" || d.failed(base) {
			continue
		}
		d.checkTables(base, transformTables(t))
		switch {
		case t.Filter != nil:
			d.checkExpr(base+".where", t.Filter.Where)
		case t.Dedup != nil:
			d.checkExpr(base+".key", t.Dedup.Key)
		case t.Project != nil:
			if (t.Project.Keep == nil) == (t.Project.Drop == nil) {
				d.errAt(base, "set exactly one of keep and drop", "keep: [columns to keep], or drop: [columns to leave out]")
			}
		case t.Rename != nil:
			r := t.Rename
			if r.Table == "" && len(r.Columns) == 0 {
				d.errAt(base, "nothing to rename", "set table (e.g. crm.{table}) or columns (e.g. - {from: email, to: email_address})")
			}
			if r.Table != "" {
				if err := pipeline.CheckNameTemplate(r.Table); err != nil {
					d.errAt(base+".table", err.Error(), "use {schema} and {table}, e.g. crm.{table}")
				} else if s, tb, ok := strings.Cut(r.Table, "."); !ok || s == "" || tb == "" || strings.Contains(tb, ".") {
					d.errAt(base+".table", "not schema.table", "write e.g. crm.{table}")
				}
			}
		case t.Cast != nil:
			for k, cc := range t.Cast.Columns {
				if _, err := eval.ParseType(cc.Column, cc.To); err != nil && !d.failed(index(base+".columns", k)) {
					d.errAt(index(base+".columns", k)+".to", err.Error(), "")
				}
			}
		case t.Compute != nil:
			if _, err := eval.ParseType(t.Compute.Column, t.Compute.Type); err != nil && !d.failed(base+".type") {
				d.errAt(base+".type", err.Error(), "")
			}
			d.checkExpr(base+".expr", t.Compute.Expr)
		case t.Mask != nil:
			m := t.Mask
			switch {
			case m.With == "hmac" && m.SecretEnv == "":
				d.errAt(base+".secret_env", "hmac masking needs a secret key", "name the environment variable holding it, e.g. secret_env: MASK_KEY")
			case m.With == "hmac" && !d.failed(base+".secret_env"):
				if v, ok := d.lookupEnv(m.SecretEnv); !ok || v == "" {
					d.errAt(base+".secret_env", "environment variable "+m.SecretEnv+" is not set", "export "+m.SecretEnv+"=<a long random key> before starting sluice")
				}
			case m.With == "fixed" && d.node(base+".value") == d.node(base):
				d.errAt(base, "fixed masking needs a value", `set value, e.g. value: "redacted"`)
			}
		case t.Route != nil:
			for k, r := range t.Route.Rules {
				p := index(base+".rules", k)
				d.checkExpr(p+".when", r.When)
				d.checkSinks(p+".sinks", r.Sinks, sinks)
				if len(r.Sinks) == 0 && r.Topic == "" && !d.failed(p) {
					d.errAt(p, "a rule needs sinks, a topic or both", "e.g. sinks: [search_vip], or topic: \"{prefix}.vip.{table}\"")
				}
				if r.Topic != "" {
					d.checkTopic(p+".topic", r.Topic, t.Route.Tables)
				}
			}
			d.checkSinks(base+".otherwise", t.Route.Otherwise, sinks)
		}
	}
}

// transformTables returns a record transform's tables patterns.
func transformTables(t *Transform) []string {
	switch {
	case t.Filter != nil:
		return t.Filter.Tables
	case t.Project != nil:
		return t.Project.Tables
	case t.Rename != nil:
		return t.Rename.Tables
	case t.Cast != nil:
		return t.Cast.Tables
	case t.Compute != nil:
		return t.Compute.Tables
	case t.Mask != nil:
		return t.Mask.Tables
	case t.Route != nil:
		return t.Route.Tables
	case t.Dedup != nil:
		return t.Dedup.Tables
	}
	return nil
}

func (d *decoder) checkTables(base string, tables []string) {
	for k, p := range tables {
		if err := pipeline.CheckPattern(p, 2); err != nil && !d.failed(index(base+".tables", k)) {
			d.errAt(index(base+".tables", k), err.Error(), "write schema.table; each part may be a glob, e.g. public.*")
		}
	}
}

func (d *decoder) checkSinks(path string, names, sinks []string) {
	for k, s := range names {
		if !slices.Contains(sinks, s) && !d.failed(index(path, k)) {
			d.errAt(index(path, k), "no sink is named "+s, "the sinks: "+strings.Join(sinks, ", ")+" (a sink's name: field, or its kind)")
		}
	}
}

// checkTopic checks a route's topic template: known placeholders, and
// {table} unless the route applies to one named table (tables sharing a
// topic would share its schema subject).
func (d *decoder) checkTopic(path, topic string, tables []string) {
	if d.failed(path) {
		return
	}
	rest := strings.NewReplacer("{prefix}", "", "{database}", "", "{schema}", "", "{table}", "").Replace(topic)
	if strings.ContainsAny(rest, "{}") {
		d.errAt(path, "unknown placeholder in "+topic, "use {prefix}, {database}, {schema} and {table}")
		return
	}
	one := len(tables) == 1 && !strings.ContainsAny(tables[0], "*?[")
	if !one && !strings.Contains(topic, "{table}") {
		d.errAt(path, "must contain {table}: the route applies to several tables, and each needs its own topic",
			"e.g. {prefix}.vip.{table}, or list one table in tables")
	}
}

// checkExpr reports a syntax error or an unknown function in the
// expression at path, at its place in the file.
func (d *decoder) checkExpr(path, src string) {
	if d.failed(path) {
		return
	}
	if err := eval.Check(src); err != nil {
		line, col, msg := 1, 1, err.Error()
		if e, ok := err.(*eval.Error); ok {
			line, col, msg = e.Line, e.Col, e.Msg
		}
		fp := d.fieldPos(d.node(path))
		e := fp.at(d.file, path, line, col)
		e.Msg, e.Hint = msg, "see the expression reference in the README"
		d.errs = append(d.errs, e)
		d.bad[path] = true
	}
}

// fieldPos is where a scalar's text starts in the file, and whether its
// lines are the file's lines (a block scalar), so a position inside the
// text maps to one in the file.
type fieldPos struct {
	Line, Col int
	Block     bool
}

func (d *decoder) fieldPos(n *yaml.Node) fieldPos {
	if n == nil {
		return fieldPos{}
	}
	p := fieldPos{Line: n.Line, Col: n.Column}
	switch {
	case n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0:
		p.Col++
	case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 && n.Line < len(d.lines):
		// The text starts on the next line, at its indentation.
		p.Line++
		p.Block = true
		l := d.lines[p.Line-1]
		p.Col = len(l) - len(strings.TrimLeft(l, " ")) + 1
	}
	return p
}

// at is the file position of line:col of the text.
func (p fieldPos) at(file, path string, line, col int) *Error {
	e := &Error{File: file, Path: path, Line: p.Line, Col: p.Col}
	switch {
	case p.Line == 0:
	case line <= 1:
		e.Col = p.Col + col - 1
	case p.Block:
		e.Line, e.Col = p.Line+line-1, p.Col+col-1
	}
	return e
}

// rememberTransformPositions keeps where every transform field was
// written, for errors found once the table shapes are known.
func (d *decoder) rememberTransformPositions(c *Config) {
	for path, n := range d.at {
		if strings.HasPrefix(path, "transforms[") {
			if c.positions == nil {
				c.positions = map[string]fieldPos{}
			}
			c.positions[path] = d.fieldPos(n)
		}
	}
}

// ErrorAt is a problem found after loading (once the source's table
// shapes are known) with the transform field at path, placed where the
// field is written: file:line:col: path: msg (hint: ...).
func (c *Config) ErrorAt(path, msg, hint string) *Error {
	return c.ExprErrorAt(path, 1, 1, msg, hint)
}

// ExprErrorAt is ErrorAt for a problem at line:col of the text written at
// path (an expression).
func (c *Config) ExprErrorAt(path string, line, col int, msg, hint string) *Error {
	p := path
	for ; p != ""; p = parentPath(p) {
		if _, ok := c.positions[p]; ok {
			break
		}
	}
	fp := c.positions[p]
	if p != path {
		line, col = 1, 1 // only the enclosing field is known
	}
	e := fp.at(c.File, path, line, col)
	e.Msg, e.Hint = msg, hint
	return e
}

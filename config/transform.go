package config

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Transform is one list item of transforms: exactly one field (the kind)
// is set. Transforms run in list order between the source and the sinks.
type Transform struct {
	Join      *JoinTransform      `yaml:"join"`
	Filter    *FilterTransform    `yaml:"filter"`
	Project   *ProjectTransform   `yaml:"project"`
	Rename    *RenameTransform    `yaml:"rename"`
	Cast      *CastTransform      `yaml:"cast"`
	Compute   *ComputeTransform   `yaml:"compute"`
	Mask      *MaskTransform      `yaml:"mask"`
	Route     *RouteTransform     `yaml:"route"`
	Window    *WindowTransform    `yaml:"window"`
	Dedup     *DedupTransform     `yaml:"dedup"`
	Nest      *NestTransform      `yaml:"nest"`
	Aggregate *AggregateTransform `yaml:"aggregate"`
}

// Kind returns the transform's kind ("filter", "join", ...).
func (t *Transform) Kind() string {
	switch {
	case t.Join != nil:
		return "join"
	case t.Filter != nil:
		return "filter"
	case t.Project != nil:
		return "project"
	case t.Rename != nil:
		return "rename"
	case t.Cast != nil:
		return "cast"
	case t.Compute != nil:
		return "compute"
	case t.Mask != nil:
		return "mask"
	case t.Route != nil:
		return "route"
	case t.Window != nil:
		return "window"
	case t.Dedup != nil:
		return "dedup"
	case t.Nest != nil:
		return "nest"
	case t.Aggregate != nil:
		return "aggregate"
	}
	return ""
}

// The record transforms (package transform): each applies to the tables
// its tables patterns match ("schema.table", globs per part; empty:
// every table) and, where a record can fail at run time, takes on_error.

// FilterTransform keeps the records whose new row makes Where true.
type FilterTransform struct {
	Tables  []string `yaml:"tables"`
	Where   string   `yaml:"where" required:"true" doc:"an expression, e.g. after.country == \"DE\""`
	OnError string   `yaml:"on_error" default:"dlq" enum:"dlq|fail"`
}

// ProjectTransform keeps (Keep) or drops (Drop) columns; exactly one is
// set.
type ProjectTransform struct {
	Tables  []string `yaml:"tables"`
	Keep    []string `yaml:"keep"`
	Drop    []string `yaml:"drop"`
	OnError string   `yaml:"on_error" default:"dlq" enum:"dlq|fail"`
}

// RenameTransform renames the table and columns.
type RenameTransform struct {
	Tables []string `yaml:"tables"`
	// Table is the new "schema.table", with {schema} and {table}
	// replaced by the old names; empty keeps the name.
	Table   string         `yaml:"table"`
	Columns []ColumnRename `yaml:"columns"`
	OnError string         `yaml:"on_error" default:"dlq" enum:"dlq|fail"`
}

// ColumnRename renames one column.
type ColumnRename struct {
	From string `yaml:"from" required:"true" doc:"a column name"`
	To   string `yaml:"to" required:"true" pattern:"^[A-Za-z_][A-Za-z0-9_]{0,62}$" doc:"a column name"`
}

// CastTransform converts columns to other types.
type CastTransform struct {
	Tables  []string     `yaml:"tables"`
	Columns []ColumnCast `yaml:"columns" required:"true" min:"1" doc:"a list such as - {column: amount, to: float64}"`
	OnError string       `yaml:"on_error" default:"dlq" enum:"dlq|fail"`
}

// ColumnCast casts one column.
type ColumnCast struct {
	Column string `yaml:"column" required:"true" doc:"a column name"`
	To     string `yaml:"to" required:"true" doc:"a type such as string, int64, float64, decimal(12,2), timestamptz"`
}

// ComputeTransform adds a column whose value Expr gives.
type ComputeTransform struct {
	Tables  []string `yaml:"tables"`
	Column  string   `yaml:"column" required:"true" pattern:"^[A-Za-z_][A-Za-z0-9_]{0,62}$" doc:"the new column's name"`
	Type    string   `yaml:"type" required:"true" doc:"a type such as string, int64, float64, decimal(12,2), timestamptz"`
	Expr    string   `yaml:"expr" required:"true" doc:"an expression, e.g. lower(after.email)"`
	OnError string   `yaml:"on_error" default:"dlq" enum:"dlq|fail"`
}

// MaskTransform hides the values of columns.
type MaskTransform struct {
	Tables  []string `yaml:"tables"`
	Columns []string `yaml:"columns" required:"true" min:"1" doc:"column names, e.g. [email]"`
	With    string   `yaml:"with" required:"true" enum:"null|fixed|sha256|hmac|keep_last|email"`
	// Value is the fixed value's text form (with: fixed).
	Value string `yaml:"value"`
	// Last is how many characters keep_last keeps.
	Last int `yaml:"last" default:"4" min:"0"`
	// SecretEnv names the environment variable holding hmac's key.
	SecretEnv string `yaml:"secret_env" pattern:"^[A-Za-z_][A-Za-z0-9_]*$"`
	OnError   string `yaml:"on_error" default:"dlq" enum:"dlq|fail"`
}

// RouteTransform sends records to named sinks.
type RouteTransform struct {
	Tables []string    `yaml:"tables"`
	Rules  []RouteRule `yaml:"rules" required:"true" min:"1" doc:"a list such as - {when: after.vip, sinks: [search_vip]}"`
	// Otherwise takes the records no rule takes; empty: every sink.
	Otherwise []string `yaml:"otherwise"`
	OnError   string   `yaml:"on_error" default:"dlq" enum:"dlq|fail"`
}

// RouteRule sends the records When holds for to Sinks (empty: every
// sink) and Kafka sinks write them to Topic; at least one of the two is
// set.
type RouteRule struct {
	When  string   `yaml:"when" required:"true" doc:"an expression, e.g. after.vip"`
	Sinks []string `yaml:"sinks"`
	// Topic is a topic template ({prefix}, {database}, {schema},
	// {table}) replacing the Kafka sinks' own for the rule's records.
	Topic string `yaml:"topic"`
}

func (*Transform) exclusive() {}

// DedupTransform passes, of the rows of its tables that carry the same
// key within TTL of source time, the first, and drops the others with
// their later changes (an upstream that writes an event twice, such as
// an outbox table).
type DedupTransform struct {
	Tables []string `yaml:"tables"`
	// Key is the expression whose value identifies an event.
	Key string `yaml:"key" required:"true" doc:"an expression, e.g. after.event_id"`
	// TTL is how long, in source time, a row holds its key after its
	// last change, and a duplicate is remembered.
	TTL     Duration `yaml:"ttl" required:"true" min:"1s" doc:"a duration such as 24h"`
	OnError string   `yaml:"on_error" default:"dlq" enum:"dlq|fail"`
	// StateDir holds its state; default <offsets.dir>/dedup/<its index
	// in transforms>.
	StateDir string `yaml:"state_dir"`
	// MaxStateBytes caps the state: past it the pipeline stops and says
	// so; 0: no cap.
	MaxStateBytes ByteSize `yaml:"max_state_bytes" default:"4GiB" min:"0"`
}

// JoinTransform denormalises: each row of From becomes a row of Output
// with, per lookup, the row it refers to embedded as an object.
type JoinTransform struct {
	// Output names the joined rows' table, "schema.table"; sinks route it
	// like a captured table.
	Output string `yaml:"output" required:"true" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"schema.table, e.g. public.order_docs"`
	// From is the captured table whose rows the output rows are; the
	// output has its primary key.
	From string `yaml:"from" required:"true" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"a captured table, e.g. public.orders"`
	// With lists the looked-up tables.
	With []JoinLookup `yaml:"with" required:"true" min:"1" doc:"a list of lookups, e.g. - {table: public.customers, on: [customer_id], as: customer}"`
	// StateDir holds the join's state; default <offsets.dir>/join/<output>.
	StateDir string `yaml:"state_dir"`
	// MaxStateBytes caps the state: past it the pipeline stops and says
	// so; 0: no cap.
	MaxStateBytes ByteSize `yaml:"max_state_bytes" default:"4GiB" min:"0"`
}

// JoinLookup is one looked-up table of a join (many-to-one: each from row
// refers to at most one row of it, by that row's primary key).
type JoinLookup struct {
	Table string `yaml:"table" required:"true" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"a captured table, e.g. public.customers"`
	// On lists the from table's columns holding the looked-up row's
	// primary key, in key order.
	On []string `yaml:"on" required:"true" min:"1" doc:"columns of the from table, e.g. [customer_id]"`
	// As names the output column holding the looked-up row.
	As string `yaml:"as" required:"true" pattern:"^[A-Za-z_][A-Za-z0-9_]{0,62}$" doc:"a column name, e.g. customer"`
	// Columns selects the looked-up row's columns; empty: all.
	Columns []string `yaml:"columns"`
}

// capturedTables returns the source's captured tables ("schema.table"),
// nil when the source does not list them.
func capturedTables(c *Config) []string {
	switch {
	case c.Source.Postgres != nil:
		return c.Source.Postgres.Tables
	case c.Source.MySQL != nil:
		return c.Source.MySQL.Tables
	case c.Source.Generate != nil:
		return []string{"demo.customers", "demo.orders", "demo.events"}
	}
	return nil
}

// validateTransforms checks that joins read captured tables and that
// their outputs and column names do not collide.
func (d *decoder) validateTransforms(c *Config) {
	captured := capturedTables(c)
	outputs := map[string]int{}
	d.validateRecordTransforms(c)
	for i, t := range c.Transforms {
		if w := t.Window; w != nil && !d.failed(index("transforms", i)+".window") {
			base := index("transforms", i) + ".window"
			d.validateWindow(c, base, w)
			if k, dup := outputs[w.Output]; dup {
				d.errAt(base+".output", "output "+w.Output+" is also the output of "+index("transforms", k), "give every join, nest, window and aggregate its own output")
			}
			outputs[w.Output] = i
		}
		if g := t.Aggregate; g != nil && !d.failed(index("transforms", i)+".aggregate") {
			base := index("transforms", i) + ".aggregate"
			d.validateAggregate(c, base, g)
			if k, dup := outputs[g.Output]; dup {
				d.errAt(base+".output", "output "+g.Output+" is also the output of "+index("transforms", k), "give every join, nest, window and aggregate its own output")
			}
			outputs[g.Output] = i
		}
		if j := t.Join; j != nil && !d.failed(index("transforms", i)+".join") {
			base := index("transforms", i) + ".join"
			d.validateDocument(captured, outputs, i, base, "from", j.From, j.Output, j.With, nil)
		}
		if n := t.Nest; n != nil && !d.failed(index("transforms", i)+".nest") {
			base := index("transforms", i) + ".nest"
			d.validateDocument(captured, outputs, i, base, "parent", n.Parent, n.Output, n.With, n.Children)
		}
	}
}

// validateDocument checks a join's or nest's tables, output and column
// names: the from (or parent) table, the looked-up and child tables are
// captured; the output is none of them nor another transform's output;
// every lookup and child has its own column name.
func (d *decoder) validateDocument(captured []string, outputs map[string]int, i int, base, fromField, from, output string, with []JoinLookup, children []NestChild) {
	hint := "capture it: add it to the source's tables"
	if captured != nil && !slices.Contains(captured, from) {
		d.errAt(base+"."+fromField, "table "+from+" is not captured by the source", hint)
	}
	if slices.Contains(captured, output) {
		d.errAt(base+".output", "output "+output+" is a captured table", "name the joined rows' table differently, e.g. "+output+"_docs")
	} else if k, dup := outputs[output]; dup {
		d.errAt(base+".output", "output "+output+" is also the output of "+index("transforms", k), "give every join, nest, window and aggregate its own output")
	}
	outputs[output] = i
	as := map[string]bool{}
	for k, l := range with {
		p := index(base+".with", k)
		if captured != nil && !slices.Contains(captured, l.Table) {
			d.errAt(p+".table", "table "+l.Table+" is not captured by the source", hint)
		}
		if as[l.As] {
			d.errAt(p+".as", "column "+l.As+" is used by another lookup or child", "give every lookup and child its own as")
		}
		as[l.As] = true
		for n, col := range l.On {
			if strings.TrimSpace(col) == "" {
				d.errAt(index(p+".on", n), "empty column name", "list the columns of "+from+" that hold the key of "+l.Table)
			}
		}
	}
	for k, c := range children {
		p := index(base+".children", k)
		if captured != nil && !slices.Contains(captured, c.Table) {
			d.errAt(p+".table", "table "+c.Table+" is not captured by the source", hint)
		}
		if as[c.As] {
			d.errAt(p+".as", "column "+c.As+" is used by another lookup or child", "give every lookup and child its own as")
		}
		as[c.As] = true
		for n, col := range c.On {
			if strings.TrimSpace(col) == "" {
				d.errAt(index(p+".on", n), "empty column name", "list the columns of "+c.Table+" that hold the key of "+from)
			}
		}
	}
}

// resolveTransformPaths fills and resolves the joins' and windows' state
// directories.
func resolveTransformPaths(c *Config, abs func(string) string) {
	resolveWindowPaths(c, abs)
	for i, t := range c.Transforms {
		if dd := t.Dedup; dd != nil {
			if dd.StateDir == "" {
				dd.StateDir = filepath.Join(c.Offsets.Dir, "dedup", strconv.Itoa(i))
			} else {
				dd.StateDir = abs(dd.StateDir)
			}
		}
		if j := t.Join; j != nil {
			if j.StateDir == "" {
				j.StateDir = filepath.Join(c.Offsets.Dir, "join", j.Output)
			} else {
				j.StateDir = abs(j.StateDir)
			}
		}
		if g := t.Aggregate; g != nil {
			if g.StateDir == "" {
				g.StateDir = filepath.Join(c.Offsets.Dir, "aggregate", g.Output)
			} else {
				g.StateDir = abs(g.StateDir)
			}
		}
		if n := t.Nest; n != nil {
			if n.StateDir == "" {
				n.StateDir = filepath.Join(c.Offsets.Dir, "nest", n.Output)
			} else {
				n.StateDir = abs(n.StateDir)
			}
		}
	}
}

package config

import (
	"slices"
	"strings"
)

// AggregateTransform keeps a materialized group-by of a captured table
// in Output (transform/aggregate): one row per group, written again on
// every change of it, deleted when its last row leaves.
type AggregateTransform struct {
	// Output names the groups' table, "schema.table"; sinks route it
	// like a captured table. Its key is the group columns.
	Output string `yaml:"output" required:"true" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"schema.table, e.g. analytics.customer_totals"`
	// Table is the captured table aggregated.
	Table   string   `yaml:"table" required:"true" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"a captured table, e.g. public.orders"`
	GroupBy []string `yaml:"group_by" required:"true" min:"1" doc:"columns of the table, e.g. [customer_id]"`
	// Aggregates are "name = function(column)" lines.
	Aggregates []string `yaml:"aggregates" required:"true" min:"1" doc:"a list such as [orders = count(), revenue = sum(amount)]"`
	// StateDir holds the state; default <offsets.dir>/aggregate/<output>.
	StateDir string `yaml:"state_dir"`
	// MaxStateBytes caps the state: past it the pipeline stops and says
	// so; 0: no cap.
	MaxStateBytes ByteSize `yaml:"max_state_bytes" default:"4GiB" min:"0"`
}

// AggregateFunctions are the functions of an aggregate: a window's but
// first and last, which need an event time.
var AggregateFunctions = []string{"count", "sum", "avg", "min", "max", "count_distinct"}

func (d *decoder) validateAggregate(c *Config, base string, g *AggregateTransform) {
	captured := capturedTables(c)
	if captured != nil && !slices.Contains(captured, g.Table) && !d.failed(base+".table") {
		d.errAt(base+".table", "table "+g.Table+" is not captured by the source", "capture it: add it to the source's tables")
	}
	if slices.Contains(captured, g.Output) && !d.failed(base+".output") {
		d.errAt(base+".output", "output "+g.Output+" is a captured table", "name the groups' table differently, e.g. analytics.customer_totals")
	}
	names := map[string]bool{}
	for k, col := range g.GroupBy {
		p := index(base+".group_by", k)
		switch {
		case strings.TrimSpace(col) == "":
			d.errAt(p, "empty column name", "list columns of "+g.Table)
		case names[col]:
			d.errAt(p, "column "+col+" is listed twice", "list each group column once")
		}
		names[col] = true
	}
	for k, a := range g.Aggregates {
		p := index(base+".aggregates", k)
		name, fn, _, err := ParseAggregate(a)
		if err != nil {
			_, _, _, err = parseAggregate(a, AggregateFunctions) // the same error, naming an aggregate's functions
		}
		switch {
		case d.failed(p):
		case err != nil:
			d.errAt(p, err.Error(), "e.g. revenue = sum(amount); count() counts rows")
		case !slices.Contains(AggregateFunctions, fn):
			d.errAt(p, fn+" needs an event time, which an aggregate without windows does not have", "use a window for "+fn+"; an aggregate's functions: "+strings.Join(AggregateFunctions, ", "))
		case names[name]:
			d.errAt(p, "output column "+name+" is used twice (the group columns and the aggregates share one row)", "give it another name")
		default:
			names[name] = true
		}
	}
}

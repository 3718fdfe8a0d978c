package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// WindowTransform computes event-time windowed aggregates of a captured
// table into Output (transform/window).
type WindowTransform struct {
	// Output names the results' table, "schema.table"; sinks route it
	// like a captured table.
	Output string `yaml:"output" required:"true" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"schema.table, e.g. analytics.revenue_per_minute"`
	// Table is the captured table windowed.
	Table string `yaml:"table" required:"true" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"a captured table, e.g. public.orders"`
	// EventTime is the column holding each row's event time; empty: the
	// source commit time.
	EventTime string `yaml:"event_time"`
	// Tumbling is the size of back-to-back windows; Hopping, instead,
	// windows of a size starting every advance; Session, instead,
	// sessions per group closed by a gap without events.
	Tumbling Duration       `yaml:"tumbling" min:"0s"`
	Hopping  *HoppingWindow `yaml:"hopping"`
	Session  *SessionWindow `yaml:"session"`
	// MaxOutOfOrderness is how far behind the newest event time the
	// watermark stays.
	MaxOutOfOrderness Duration `yaml:"max_out_of_orderness" default:"0s" min:"0s"`
	// AllowedLateness keeps a window's state that long after its end,
	// so a late change still corrects its result.
	AllowedLateness Duration `yaml:"allowed_lateness" default:"0s" min:"0s"`
	// IdleTimeout: after this long (source time) without a change of the
	// table, the watermark follows the source's heartbeats; 0: never.
	IdleTimeout Duration `yaml:"idle_timeout" default:"30s" min:"0s"`
	// Emit is when results are written: on_close, or early (also while
	// the window is open, every EarlyInterval, marked partial).
	Emit          string   `yaml:"emit" default:"on_close" enum:"on_close|early"`
	EarlyInterval Duration `yaml:"early_interval" default:"10s" min:"1ms"`
	// Late is what a change too late for its window does.
	Late string `yaml:"late" default:"drop" enum:"drop|side_output|correct"`
	// CorrectWithin, with late: correct, is how long past the allowed
	// lateness a window's aggregates are kept for corrections.
	CorrectWithin Duration `yaml:"correct_within" default:"1h" min:"1s"`
	// SideOutput names the sink that takes the late changes, as rows of
	// <output>_late; empty: the dead-letter queue.
	SideOutput string   `yaml:"side_output"`
	GroupBy    []string `yaml:"group_by"`
	// Aggregates are "name = function(column)" lines.
	Aggregates []string `yaml:"aggregates" required:"true" min:"1" doc:"a list such as [orders = count(), revenue = sum(amount)]"`
	// StateDir holds the window's state; default <offsets.dir>/window/<output>.
	StateDir string `yaml:"state_dir"`
	// MaxStateBytes caps the state: past it the pipeline stops and says
	// so; 0: no cap.
	MaxStateBytes ByteSize `yaml:"max_state_bytes" default:"4GiB" min:"0"`
}

// SessionWindow is sessions: runs of events each less than Gap after
// the one before.
type SessionWindow struct {
	Gap Duration `yaml:"gap" required:"true" min:"1us"`
}

// HoppingWindow is windows of Size starting every Advance.
type HoppingWindow struct {
	Size    Duration `yaml:"size" required:"true" min:"1us"`
	Advance Duration `yaml:"advance" required:"true" min:"1us"`
}

var aggregateLine = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]{0,62})\s*=\s*([a-z_]+)\(\s*([A-Za-z_][A-Za-z0-9_]*)?\s*\)\s*$`)

// WindowFunctions are the aggregate functions of a window.
var WindowFunctions = []string{"count", "sum", "avg", "min", "max", "count_distinct", "first", "last"}

// ParseAggregate reads "name = function(column)"; column is empty for
// count().
func ParseAggregate(s string) (name, fn, column string, err error) {
	return parseAggregate(s, WindowFunctions)
}

// parseAggregate is ParseAggregate with the functions the transform
// knows.
func parseAggregate(s string, funcs []string) (name, fn, column string, err error) {
	m := aggregateLine.FindStringSubmatch(s)
	if m == nil {
		return "", "", "", fmt.Errorf("%q is not name = function(column)", s)
	}
	name, fn, column = m[1], m[2], m[3]
	switch {
	case !slices.Contains(funcs, fn):
		return "", "", "", fmt.Errorf("unknown aggregate function %s; the functions: %s", fn, strings.Join(funcs, ", "))
	case column == "" && fn != "count":
		return "", "", "", fmt.Errorf("%s needs a column, e.g. %s = %s(amount)", fn, name, fn)
	}
	return name, fn, column, nil
}

func (d *decoder) validateWindow(c *Config, base string, w *WindowTransform) {
	captured := capturedTables(c)
	if captured != nil && !slices.Contains(captured, w.Table) && !d.failed(base+".table") {
		d.errAt(base+".table", "table "+w.Table+" is not captured by the source", "capture it: add it to the source's tables")
	}
	if slices.Contains(captured, w.Output) && !d.failed(base+".output") {
		d.errAt(base+".output", "output "+w.Output+" is a captured table", "name the results' table differently, e.g. analytics.orders_per_minute")
	}
	kinds := 0
	for _, set := range []bool{w.Tumbling != 0, w.Hopping != nil, w.Session != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds != 1 && !d.failed(base+".tumbling", base+".hopping", base+".session"):
		d.errAt(base, "set exactly one of tumbling, hopping and session", "tumbling: 1m, hopping: {size: 5m, advance: 1m} or session: {gap: 30m}")
	case w.Hopping != nil && w.Hopping.Advance > w.Hopping.Size && !d.failed(base+".hopping"):
		d.errAt(base+".hopping.advance", "the advance is longer than the size (events between windows would belong to none)", "make advance at most size")
	}
	if w.SideOutput != "" && !d.failed(base+".side_output") {
		var sinks []string
		for i := range c.Sinks {
			sinks = append(sinks, c.Sinks[i].Name())
		}
		switch {
		case w.Late == "drop":
			d.errAt(base+".side_output", "side_output names a sink for late changes, but late is drop", "set late: side_output (or correct), or remove side_output")
		case !slices.Contains(sinks, w.SideOutput):
			d.errAt(base+".side_output", "no sink is named "+w.SideOutput, "the sinks: "+strings.Join(sinks, ", ")+" (a sink's name: field, or its kind)")
		}
	}
	if w.Late == "correct" && !d.failed(base+".late") {
		switch {
		case w.Session != nil:
			d.errAt(base+".late", "late: correct keeps a window's aggregates without its rows, and sessions need their rows to merge and split", "use allowed_lateness to keep sessions open to late changes, and late: side_output")
		case w.EventTime == "":
			d.errAt(base+".late", "late: correct needs an event_time column: with the commit time a before image does not say which window a row was in", "set event_time: <a timestamp column>")
		}
	}
	names := map[string]bool{"window_start": true, "window_end": true, "partial": w.Emit == "early"}
	for _, g := range w.GroupBy {
		names[g] = true
	}
	for k, a := range w.Aggregates {
		p := index(base+".aggregates", k)
		name, _, _, err := ParseAggregate(a)
		switch {
		case d.failed(p):
		case err != nil:
			d.errAt(p, err.Error(), "e.g. revenue = sum(amount); count() counts rows")
		case names[name]:
			d.errAt(p, "output column "+name+" is used twice (window_start, window_end, the group columns, the aggregates and, with emit: early, partial share one row)", "give it another name")
		default:
			names[name] = true
		}
	}
}

// resolveWindowPaths fills and resolves the windows' state directories.
func resolveWindowPaths(c *Config, abs func(string) string) {
	for _, t := range c.Transforms {
		if w := t.Window; w != nil {
			if w.StateDir == "" {
				w.StateDir = filepath.Join(c.Offsets.Dir, "window", w.Output)
			} else {
				w.StateDir = abs(w.StateDir)
			}
		}
	}
}

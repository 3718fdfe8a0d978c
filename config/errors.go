package config

import (
	"fmt"
	"sort"
	"strings"
)

// maxErrors bounds how many problems one Parse reports; the rest are
// summarised in a final line.
const maxErrors = 100

// Error is one problem found in a config file, positioned at the YAML node
// that causes it. It prints as
//
//	file:line:col: field.path: what is wrong (hint: how to fix)
type Error struct {
	File string // the file name given to Load or Parse
	Line int    // 1-based line; 0 when unknown
	Col  int    // 1-based column; 0 when unknown
	// Path is the field path, e.g. "sinks[0].duckdb.path"; empty for
	// problems that concern the file as a whole (YAML syntax).
	Path string
	Msg  string // what is wrong; never contains an interpolated value
	Hint string // how to fix it; may be empty
}

// Error formats the problem on one line.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, ":%d", e.Col)
		}
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Hint != "" {
		b.WriteString(" (hint: ")
		b.WriteString(e.Hint)
		b.WriteString(")")
	}
	return b.String()
}

// Errors is every problem found in one config file, in file order. Load and
// Parse return it (as *Errors) whenever the file is invalid, so callers can
// use errors.As to reach the individual problems.
type Errors struct {
	List []*Error
}

// Error prints one problem per line.
func (e *Errors) Error() string {
	lines := make([]string, len(e.List))
	for i, x := range e.List {
		lines[i] = x.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes the individual problems to errors.Is and errors.As.
func (e *Errors) Unwrap() []error {
	out := make([]error, len(e.List))
	for i, x := range e.List {
		out[i] = x
	}
	return out
}

// finish orders problems by position (keeping discovery order for ties)
// and caps their number.
func finish(file string, list []*Error) *Errors {
	sort.SliceStable(list, func(i, j int) bool {
		if list[i].Line != list[j].Line {
			return list[i].Line < list[j].Line
		}
		return list[i].Col < list[j].Col
	})
	if len(list) > maxErrors {
		more := len(list) - maxErrors
		list = append(list[:maxErrors:maxErrors], &Error{
			File: file,
			Msg:  fmt.Sprintf("%d more problem(s) not shown", more),
			Hint: "fix the ones above first",
		})
	}
	return &Errors{List: list}
}

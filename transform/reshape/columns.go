package reshape

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/scope"
)

// Project keeps only the columns keep lists (each must exist), or drops
// those drop lists (absent ones are ignored, so one drop list can cover
// many tables). A key column cannot be dropped: a sink could not upsert
// without it.
func Project(keep, drop []string) Planner {
	return func(in *pipeline.Table) (*Plan, error) {
		field := "drop"
		if keep != nil {
			field = "keep"
			for _, k := range keep {
				if index(in, k) < 0 {
					return nil, &scope.FieldError{Field: field, Table: in.ID, Err: errors.New(eval.UnknownColumn(in, k))}
				}
			}
		}
		cols, src, conv := Same(in)
		var oc []pipeline.Column
		var os []int
		for i := range cols {
			gone := slices.Contains(drop, cols[i].Name) || (keep != nil && !slices.Contains(keep, cols[i].Name))
			if gone && cols[i].Key {
				return nil, &scope.FieldError{Field: field, Table: in.ID,
					Err: fmt.Errorf("column %s is part of the primary key, which every sink needs; keep it", cols[i].Name)}
			}
			if !gone {
				oc, os = append(oc, cols[i]), append(os, src[i])
			}
		}
		if len(oc) == len(in.Columns) {
			return &Plan{Out: in}, nil
		}
		return Build(in, in.ID, oc, os, conv[:len(oc)]), nil
	}
}

// ColumnRename renames one column.
type ColumnRename struct{ From, To string }

// Rename renames the table (to, a "schema.table" template with {schema}
// and {table}; "" keeps the name) and columns (each must exist; a key
// column may be renamed). Two columns may not end with one name.
func Rename(to string, columns []ColumnRename) Planner {
	return func(in *pipeline.Table) (*Plan, error) {
		cols, src, conv := Same(in)
		for _, c := range columns {
			i := index(in, c.From)
			if i < 0 {
				return nil, &scope.FieldError{Field: "columns", Table: in.ID, Err: errors.New(eval.UnknownColumn(in, c.From))}
			}
			cols[i].Name = c.To
		}
		seen := map[string]bool{}
		for _, c := range cols {
			if seen[c.Name] {
				return nil, &scope.FieldError{Field: "columns", Table: in.ID, Err: fmt.Errorf("two columns would be named %s", c.Name)}
			}
			seen[c.Name] = true
		}
		id := in.ID
		if to != "" {
			name := strings.NewReplacer("{schema}", in.ID.Schema, "{table}", in.ID.Table, "{database}", in.ID.Database).Replace(to)
			s, t, ok := strings.Cut(name, ".")
			if !ok || s == "" || t == "" || strings.Contains(t, ".") {
				return nil, &scope.FieldError{Field: "table", Table: in.ID, Err: fmt.Errorf("%q is not schema.table", name)}
			}
			id.Schema, id.Table = s, t
		}
		if len(columns) == 0 && id == in.ID {
			return &Plan{Out: in}, nil
		}
		return Build(in, id, cols, src, conv), nil
	}
}

// ColumnCast casts one column to a type (eval.ParseType's names).
type ColumnCast struct{ Column, To string }

// Cast converts columns to other types (cast.go lists the conversions).
// Each column must exist and not be a key column.
func Cast(casts []ColumnCast) Planner {
	return func(in *pipeline.Table) (*Plan, error) {
		cols, src, conv := Same(in)
		for _, c := range casts {
			i := index(in, c.Column)
			if i < 0 {
				return nil, &scope.FieldError{Field: "columns", Table: in.ID, Err: errors.New(eval.UnknownColumn(in, c.Column))}
			}
			if in.Columns[i].Key {
				return nil, &scope.FieldError{Field: "columns", Table: in.ID,
					Err: fmt.Errorf("column %s is part of the primary key; a cast would change the key sinks upsert by", c.Column)}
			}
			to, err := eval.ParseType(c.Column, c.To)
			if err != nil {
				return nil, &scope.FieldError{Field: "columns", Table: in.ID, Err: err}
			}
			f, err := Converter(&in.Columns[i], &to)
			if err != nil {
				return nil, &scope.FieldError{Field: "columns", Table: in.ID, Err: err}
			}
			to.Nullable, to.Comment, to.Missing = in.Columns[i].Nullable, in.Columns[i].Comment, in.Columns[i].Missing
			cols[i], conv[i] = to, f
		}
		return Build(in, in.ID, cols, src, conv), nil
	}
}

func index(t *pipeline.Table, name string) int {
	for i := range t.Columns {
		if t.Columns[i].Name == name {
			return i
		}
	}
	return -1
}

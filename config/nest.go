package config

// NestTransform builds documents: each row of Parent becomes a row of
// Output with, per child, the rows of the child table that refer to it
// as an array of objects, and, per lookup (as a join's), the row it
// refers to as an object.
type NestTransform struct {
	// Output names the documents' table, "schema.table"; sinks route it
	// like a captured table.
	Output string `yaml:"output" required:"true" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"schema.table, e.g. public.order_docs"`
	// Parent is the captured table whose rows the documents are; the
	// output has its primary key.
	Parent string `yaml:"parent" required:"true" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"a captured table, e.g. public.orders"`
	// Children lists the nested tables (one-to-many).
	Children []NestChild `yaml:"children" required:"true" min:"1" doc:"a list such as - {table: public.order_items, on: [order_id], as: items, order_by: [line_no]}"`
	// With lists the looked-up tables (many-to-one), as a join's.
	With []JoinLookup `yaml:"with"`
	// StateDir holds the state; default <offsets.dir>/nest/<output>.
	StateDir string `yaml:"state_dir"`
	// MaxStateBytes caps the state: past it the pipeline stops and says
	// so; 0: no cap.
	MaxStateBytes ByteSize `yaml:"max_state_bytes" default:"4GiB" min:"0"`
}

// NestChild is one nested table: its rows whose On columns hold a parent
// row's primary key become that row's array As.
type NestChild struct {
	Table string `yaml:"table" required:"true" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"a captured table, e.g. public.order_items"`
	// On lists the child table's columns holding the parent's primary
	// key, in key order.
	On []string `yaml:"on" required:"true" min:"1" doc:"columns of the child table, e.g. [order_id]"`
	// As names the output column holding the array.
	As string `yaml:"as" required:"true" pattern:"^[A-Za-z_][A-Za-z0-9_]{0,62}$" doc:"a column name, e.g. items"`
	// OrderBy lists the child columns the array is sorted by (ascending,
	// NULLs last, ties by the child's primary key); empty: the key.
	OrderBy []string `yaml:"order_by"`
	// Columns selects the child rows' columns; empty: all.
	Columns []string `yaml:"columns"`
	// MaxChildren bounds the array; OnOverflow says what a parent with
	// more children does: truncate embeds the first MaxChildren in order
	// (and counts it in sluice_nest_truncated_total), fail stops the
	// pipeline naming the row.
	MaxChildren int    `yaml:"max_children" default:"1000" min:"1"`
	OnOverflow  string `yaml:"on_overflow" default:"truncate" enum:"truncate|fail"`
}

package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/verify"
)

// SchemaLookup finds the schema a registry holds under an id, as every
// consumer of the Confluent wire format does; Rows decodes with it.
type SchemaLookup interface {
	// SchemaByID returns the schema text registered under id. It blocks
	// until the registry answered and honours ctx.
	SchemaByID(ctx context.Context, id int) (string, error)
}

// schemaLookup returns the lookup Rows uses (the sink's registry client),
// nil when it cannot look schemas up by id.
func (s *Sink) schemaLookup() SchemaLookup {
	l, _ := s.reg.(SchemaLookup)
	return l
}

// decoder turns the records of a table topic back into the record model,
// in one table shape.
type decoder struct {
	// exact is the shape's own codec; relaxed has every non-key column
	// nullable, so that Avro schema resolution can read events of other
	// shapes into it (a column an event lacks becomes null).
	exact, relaxed *schema.Codec
	table          *pipeline.Table
	row            bool // the row envelope, else Debezium's
	lookup         SchemaLookup
	compat         *avro.SchemaCompatibility
	readers        map[readerKey]*reader
}

type readerKey struct {
	id  int
	key bool
}

// reader reads the payloads written under one schema id.
type reader struct {
	// other: the schema is another table's (a topic that several tables
	// share, as with the record name strategy); its records are skipped.
	other bool
	codec *schema.Codec
	// resolved reads the writer's payload in the shape of codec's schema
	// target, which the payload is encoded in again; nil when the writer
	// schema is codec's own.
	resolved, target avro.Schema
	// older are the columns with a missing value that the writer's rows
	// lack: events written before the column was added, whose rows hold
	// its missing value (which not every type can have as its Avro
	// default).
	older []int
}

func newDecoder(table *pipeline.Table, opts schema.Options, row bool, lookup SchemaLookup) (*decoder, error) {
	exact, err := schema.NewCodec(table, opts)
	if err != nil {
		return nil, err
	}
	loose := *table
	loose.Columns = slices.Clone(table.Columns)
	for i := range loose.Columns {
		if !slices.Contains(table.KeyIdx, i) {
			loose.Columns[i].Nullable = true
		}
	}
	relaxed, err := schema.NewCodec(&loose, opts)
	if err != nil {
		return nil, err
	}
	return &decoder{exact: exact, relaxed: relaxed, table: table, row: row, lookup: lookup, compat: avro.NewSchemaCompatibility(),
		readers: map[readerKey]*reader{}}, nil
}

// side is the schema of c that a key (or value) is written in.
func (d *decoder) side(c *schema.Codec, key bool) avro.Schema {
	switch {
	case key:
		return c.KeySchema()
	case d.row:
		return c.ValueSchema()
	}
	return c.EnvelopeSchema()
}

// reader returns how to read payloads written under schema id.
func (d *decoder) reader(ctx context.Context, id int, key bool) (*reader, error) {
	rk := readerKey{id, key}
	if r, ok := d.readers[rk]; ok {
		return r, nil
	}
	text, err := d.lookup.SchemaByID(ctx, id)
	if err != nil {
		return nil, err
	}
	w, err := schema.ParseSchemaText(text)
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	r, err := d.readerFor(id, w, key)
	if err != nil {
		return nil, err
	}
	d.readers[rk] = r
	return r, nil
}

// readerFor chooses how to read payloads written in schema w (id): not at
// all when it is another table's (another record name), with a codec whose
// own schema it is, or resolved into the relaxed shape.
func (d *decoder) readerFor(id int, w avro.Schema, key bool) (*reader, error) {
	own := d.side(d.exact, key).(avro.NamedSchema)
	if n, ok := w.(avro.NamedSchema); !ok || n.FullName() != own.FullName() {
		return &reader{other: true}, nil
	}
	for _, c := range []*schema.Codec{d.exact, d.relaxed} {
		if d.side(c, key).String() == w.String() {
			return &reader{codec: c}, nil
		}
	}
	target := d.side(d.relaxed, key)
	res, err := d.compat.Resolve(target, w)
	if err != nil {
		return nil, fmt.Errorf("schema id %d cannot be read in the table's shape: %w", id, err)
	}
	r := &reader{codec: d.relaxed, resolved: res, target: target}
	if !key {
		if row := d.rowRecord(w); row != nil {
			for i := range d.table.Columns {
				c := &d.table.Columns[i]
				if c.Missing != nil && !hasField(row, schema.SanitizeName(c.Name)) {
					r.older = append(r.older, i)
				}
			}
		}
	}
	return r, nil
}

// rowRecord is the row record of a value schema w: w itself in the row
// envelope, else the record of its "after" field.
func (d *decoder) rowRecord(w avro.Schema) *avro.RecordSchema {
	rec, ok := w.(*avro.RecordSchema)
	if !ok || d.row {
		return rec
	}
	for _, f := range rec.Fields() {
		if f.Name() != "after" {
			continue
		}
		t := f.Type()
		if u, ok := t.(*avro.UnionSchema); ok {
			for _, b := range u.Types() {
				if b.Type() != avro.Null {
					t = b
				}
			}
		}
		if r, ok := t.(*avro.RefSchema); ok {
			t = r.Schema()
		}
		after, _ := t.(*avro.RecordSchema)
		return after
	}
	return nil
}

func hasField(r *avro.RecordSchema, name string) bool {
	for _, f := range r.Fields() {
		if f.Name() == name {
			return true
		}
	}
	return false
}

// payload unframes b and returns its Avro payload in the reader's schema.
func (d *decoder) payload(ctx context.Context, b []byte, key bool) (*reader, []byte, error) {
	id, p, err := schema.Unframe(b)
	if err != nil {
		return nil, nil, err
	}
	r, err := d.reader(ctx, id, key)
	if err != nil || r.other || r.resolved == nil {
		return r, p, err
	}
	var m map[string]any
	if err := r.codec.API().Unmarshal(r.resolved, p, &m); err != nil {
		return nil, nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	if p, err = r.codec.API().Marshal(r.target, m); err != nil {
		return nil, nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	return r, p, nil
}

// decode reads one record: its version header, its value (nil: a
// tombstone) and, unless it is a truncate event, its key. A record of
// another table comes back with other set.
func (d *decoder) decode(ctx context.Context, rec *kgo.Record) (event, error) {
	var ev event
	vs, ok := header(rec, headerVersion)
	if !ok {
		return ev, fmt.Errorf("no %s header", headerVersion)
	}
	v, err := pipeline.ParseVersion(vs)
	if err != nil {
		return ev, fmt.Errorf("header %s: %w", headerVersion, err)
	}
	ev.version = v
	var r0 *reader // the value's
	if rec.Value != nil {
		r, p, err := d.payload(ctx, rec.Value, false)
		if err != nil {
			return ev, fmt.Errorf("value: %w", err)
		}
		r0 = r
		if r.other {
			ev.other = true
			return ev, nil
		}
		if d.row {
			row, err := r.codec.DecodeValue(p)
			if err != nil {
				return ev, fmt.Errorf("value: %w", err)
			}
			if !row.Deleted && row.Op != "d" {
				ev.row = row.Values
			}
		} else {
			env, err := r.codec.DecodeEnvelope(p)
			if err != nil {
				return ev, fmt.Errorf("value: %w", err)
			}
			switch env.Op {
			case "t":
				ev.truncate = true
				return ev, nil
			case "d":
			case "c", "u", "r":
				if env.After == nil {
					return ev, fmt.Errorf("a %q event without an after image", env.Op)
				}
				ev.row = env.After
			default:
				return ev, fmt.Errorf("unknown op %q", env.Op)
			}
		}
	}
	if ev.row != nil {
		if err := d.textValues(rec, ev.row); err != nil {
			return ev, err
		}
		for _, i := range r0.older {
			if i < len(ev.row) && ev.row[i] == nil {
				ev.row[i] = d.table.Columns[i].Missing
			}
		}
	}
	if rec.Key == nil {
		return ev, errors.New("a change event without a key")
	}
	r, p, err := d.payload(ctx, rec.Key, true)
	if err != nil {
		return ev, fmt.Errorf("key: %w", err)
	}
	if r.other {
		ev.other = true
		return ev, nil
	}
	key, err := r.codec.DecodeKey(p)
	if err != nil {
		return ev, fmt.Errorf("key: %w", err)
	}
	ev.key = verify.Key(key)
	return ev, nil
}

// textValues puts into row the values a record carries in headerText
// headers (written as null in its payload because Avro cannot hold them).
func (d *decoder) textValues(rec *kgo.Record, row []any) error {
	for _, h := range rec.Headers {
		name, ok := strings.CutPrefix(h.Key, headerText)
		if !ok {
			continue
		}
		for i := range d.table.Columns {
			if c := &d.table.Columns[i]; c.Name == name && i < len(row) {
				v, err := textform.Decode(c, string(h.Value))
				if err != nil {
					return fmt.Errorf("header %s: %w", h.Key, err)
				}
				row[i] = v
			}
		}
	}
	return nil
}

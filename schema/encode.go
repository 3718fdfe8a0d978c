package schema

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sync"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/sluice-cdc/sluice/pipeline"
)

// ErrNoRow is returned by EncodeKey and EncodeValue for records without a
// row (truncates, heartbeats): they have no flattened form.
var ErrNoRow = errors.New("schema: record has no row image")

// ErrNotRepresentable marks values that no Avro type of their column can
// hold: decimal NaN and ±Infinity, multi-dimensional array values, integers
// out of their column's range. The runtime dead-letters such records.
var ErrNotRepresentable = errors.New("value not representable in Avro")

// EncodeError is a value that could not be encoded, naming the table, the
// column, its type and the Go type of the value.
type EncodeError struct {
	Table  pipeline.TableID
	Column string
	Type   pipeline.Type
	GoType string
	Err    error
}

func (e *EncodeError) Error() string {
	return fmt.Sprintf("schema: %s column %q (%s, value %s): %v", e.Table, e.Column, e.Type, e.GoType, e.Err)
}

func (e *EncodeError) Unwrap() error { return e.Err }

// SourceInfo is what the Debezium envelope carries beyond the record itself.
// Zero fields fall back as documented per field.
type SourceInfo struct {
	Version   string // sluice's version
	Connector string // "" → Options.ConnectorName (or "sluice")
	Name      string // "" → Options.ServerName
	TsMs      int64  // source commit time in ms; 0 → Record.EventTime
	Snapshot  string // "true", "false" or "last"; "" → "true" for reads, else "false"
	DB        string // "" → TableID.Database, else TableID.Schema
	Schema    string // "" → TableID.Schema
	Table     string // "" → TableID.Table
	Sequence  *string
	TxID      *int64 // nil → Record.TxID when non-zero
	LSN       *int64
	Xmin      *int64
	// Transaction fills the envelope's transaction block; nil writes null.
	Transaction *Transaction
	// ProcessedAt is the envelope's ts_ms; zero → time.Now().
	ProcessedAt time.Time
}

// Transaction is the envelope's transaction block (Debezium's event.block).
type Transaction struct {
	ID                  string
	TotalOrder          int64
	DataCollectionOrder int64
}

// Codec encodes the records of one table shape. It writes Avro binary
// straight from the pipeline values, following a plan compiled once per
// shape (field order, union branches, a writer per column type), without
// building generic maps; the output is what hamba writes for the same
// schema. It owns a frozen hamba configuration for decoding: hamba caches
// codecs by schema fingerprint, and two shapes of one table share record
// names, so a Codec never shares caches with the Codec of another shape. A
// Codec is safe for concurrent use.
type Codec struct {
	table    *pipeline.Table
	opts     Options
	api      avro.API
	key      *avro.RecordSchema // nil when the table has no key
	value    *avro.RecordSchema
	envelope *avro.RecordSchema
	keyPlan  []colPlan
	rowPlan  []colPlan // value record columns (also the envelope's row)
	envRow   string    // union branch name of the envelope's row record
}

// colPlan is how one column is written into one record.
type colPlan struct {
	idx      int
	col      *pipeline.Column
	name     string // Avro field name
	nullable bool   // the field is ["null", T], or [T, "null"] (a missing value's default)
	// nullTag and valTag are the union branch indexes (zig-zag encoded)
	// of null and of T.
	nullTag, valTag byte
	branch          string // union branch name of T
	schema          avro.Schema
	conv            func(any) (any, error) // the value hamba would encode (reference, errors)
	write           writeFn                // appends the Avro binary of T
	zeroEnc         []byte                 // T's encoding of the zero value, for columns a before image lacks
}

// NewCodec builds the key, value and envelope schemas of t and their
// encoders. A table without key columns gets a Codec whose EncodeKey
// returns ErrNoKey.
func NewCodec(t *pipeline.Table, opts Options) (*Codec, error) {
	c := &Codec{table: t, opts: opts, api: avro.Config{MaxByteSliceSize: -1}.Freeze()}
	if t == nil {
		return nil, errors.New("schema: nil table")
	}
	if len(t.KeyIdx) > 0 {
		k, err := KeySchema(t, opts)
		if err != nil {
			return nil, err
		}
		c.key = k.(*avro.RecordSchema)
		if c.keyPlan, err = c.plan(c.key, t.KeyIdx); err != nil {
			return nil, err
		}
	}
	v, err := ValueSchema(t, opts)
	if err != nil {
		return nil, err
	}
	c.value = v.(*avro.RecordSchema)
	all := make([]int, len(t.Columns))
	for i := range all {
		all[i] = i
	}
	if c.rowPlan, err = c.plan(c.value, all); err != nil {
		return nil, err
	}
	e, err := EnvelopeSchema(t, opts)
	if err != nil {
		return nil, err
	}
	c.envelope = e.(*avro.RecordSchema)
	c.envRow = Namespace(opts.ServerName, t.ID) + ".Value"
	return c, nil
}

// Table returns the shape the codec was built for.
func (c *Codec) Table() *pipeline.Table { return c.table }

// KeySchema returns the key record, nil when the table has no key.
func (c *Codec) KeySchema() avro.Schema {
	if c.key == nil {
		return nil
	}
	return c.key
}

// ValueSchema returns the flattened value record (row image + metadata).
func (c *Codec) ValueSchema() avro.Schema { return c.value }

// EnvelopeSchema returns the Debezium-style envelope record.
func (c *Codec) EnvelopeSchema() avro.Schema { return c.envelope }

// API returns the codec's private hamba configuration, for decoding with
// the same schemas without touching hamba's global caches.
func (c *Codec) API() avro.API { return c.api }

func (c *Codec) plan(rec *avro.RecordSchema, cols []int) ([]colPlan, error) {
	fields := rec.Fields()
	plans := make([]colPlan, len(cols))
	for i, idx := range cols {
		col := &c.table.Columns[idx]
		f := fields[i]
		p := colPlan{idx: idx, col: col, name: f.Name(), schema: f.Type()}
		if u, ok := p.schema.(*avro.UnionSchema); ok {
			p.nullable = true
			p.nullTag, p.valTag, p.schema = unionNull, unionValue1, u.Types()[1]
			if u.Types()[0].Type() != avro.Null {
				p.nullTag, p.valTag, p.schema = unionValue1, unionNull, u.Types()[0]
			}
			p.branch = branchName(p.schema)
		}
		conv, err := c.converter(col, col.Type, p.schema)
		if err != nil {
			return nil, err
		}
		p.conv = conv
		if _, err = conv(zeroValue(col.Type)); err != nil {
			return nil, c.encErr(col, nil, err)
		}
		if p.write, err = c.writer(col, col.Type); err != nil {
			return nil, err
		}
		if p.zeroEnc, err = p.write(nil, zeroValue(col.Type)); err != nil {
			return nil, c.encErr(col, nil, err)
		}
		plans[i] = p
	}
	return plans, nil
}

// EncodeKey encodes the key columns of r (from After, else Before) as Avro
// binary, without framing.
func (c *Codec) EncodeKey(r *pipeline.Record) ([]byte, error) {
	buf := getBuf()
	b, err := c.AppendKey(*buf, r)
	return finish(buf, b, err)
}

// AppendKey is EncodeKey appending to dst: it returns the extended slice
// (on error, dst's bytes beyond len(dst) are unspecified).
func (c *Codec) AppendKey(dst []byte, r *pipeline.Record) ([]byte, error) {
	if err := c.check(r); err != nil {
		return dst, err
	}
	if c.key == nil {
		return dst, fmt.Errorf("%w: %s", ErrNoKey, c.table.ID)
	}
	img, before := r.After, false
	if img == nil {
		img, before = r.Before, true
	}
	if img == nil || !r.Op.IsData() || r.Op == pipeline.OpTruncate {
		return dst, fmt.Errorf("%w: %s %s", ErrNoRow, c.table.ID, r.Op)
	}
	return c.writeImage(dst, c.keyPlan, img, before, false, nil)
}

// EncodeValue encodes r in the flattened form: the row image (After; for
// deletes the Before image) plus __op, __version (hex), __deleted and
// __source_ts_ms (EventTime in ms, 0 when unset). Truncates and heartbeats
// return ErrNoRow.
//
// NULL in a NOT NULL column is an error, except in the image of a delete:
// there columns that a key-only old tuple did not carry arrive as nil and
// encode as their type's zero value (0, "", false, the epoch, empty bytes
// or array), as Debezium does. pipeline.Unchanged values need
// Options.Unchanged: they encode as null and are listed in
// __sluice_unchanged; without it they are an error.
func (c *Codec) EncodeValue(r *pipeline.Record) ([]byte, error) { return c.EncodeValueFallback(r, nil) }

// TextFallback receives each value of a nullable column that the mapping
// cannot represent (ErrNotRepresentable: a decimal NaN or infinity, a
// multi-dimensional array), which the Fallback encoders write as null
// instead of failing: before tells the image (the Before image of an
// envelope or a delete), col the column's index in the table. The caller
// carries the value in a form of its own beside the payload (the Kafka
// sink: a record header with its text form).
type TextFallback func(before bool, col int)

// EncodeValueFallback is EncodeValue with fb (nil: none) receiving the
// values written as null because Avro cannot hold them.
func (c *Codec) EncodeValueFallback(r *pipeline.Record, fb TextFallback) ([]byte, error) {
	buf := getBuf()
	b, err := c.AppendValueFallback(*buf, r, fb)
	return finish(buf, b, err)
}

// AppendValueFallback is EncodeValueFallback appending to dst, as
// AppendKey.
func (c *Codec) AppendValueFallback(dst []byte, r *pipeline.Record, fb TextFallback) ([]byte, error) {
	if err := c.check(r); err != nil {
		return dst, err
	}
	var img []any
	before := false
	switch r.Op {
	case pipeline.OpInsert, pipeline.OpUpdate, pipeline.OpRead:
		img = r.After
	case pipeline.OpDelete:
		img, before = r.Before, true
	}
	if img == nil {
		return dst, fmt.Errorf("%w: %s %s", ErrNoRow, c.table.ID, r.Op)
	}
	b, err := c.writeImage(dst, c.rowPlan, img, before, c.opts.Unchanged, fb)
	if err == nil {
		b = appendString(b, r.Op.String())
		b = appendVersion(b, r.Version)
		b = appendBool(b, r.Op == pipeline.OpDelete)
		b = appendLong(b, millis(r.EventTime))
	}
	return b, err
}

// EncodeEnvelope encodes r as a Debezium-style change event: before (the
// Before image or null), after (the After image or null), source (from src
// with the fallbacks documented on SourceInfo), op (c, u, d, r or t), ts_ms
// and transaction. Images follow the rules of EncodeValue; the zero-value
// fallback for missing NOT NULL columns applies to the before image.
func (c *Codec) EncodeEnvelope(r *pipeline.Record, src SourceInfo) ([]byte, error) {
	return c.EncodeEnvelopeFallback(r, src, nil)
}

// EncodeEnvelopeFallback is EncodeEnvelope with fb (nil: none) receiving
// the values written as null because Avro cannot hold them.
func (c *Codec) EncodeEnvelopeFallback(r *pipeline.Record, src SourceInfo, fb TextFallback) ([]byte, error) {
	buf := getBuf()
	b, err := c.AppendEnvelopeFallback(*buf, r, &src, fb)
	return finish(buf, b, err)
}

// AppendEnvelopeFallback is EncodeEnvelopeFallback appending to dst, as
// AppendKey.
func (c *Codec) AppendEnvelopeFallback(dst []byte, r *pipeline.Record, src *SourceInfo, fb TextFallback) ([]byte, error) {
	if err := c.check(r); err != nil {
		return dst, err
	}
	if !r.Op.IsData() {
		return dst, fmt.Errorf("schema: %s: %s record has no envelope", c.table.ID, r.Op)
	}
	return c.writeEnvelope(dst, r, src, fb)
}

// writeEnvelope appends the Envelope record of r: before, after, source,
// op, ts_ms, transaction, in schema order.
func (c *Codec) writeEnvelope(b []byte, r *pipeline.Record, src *SourceInfo, fb TextFallback) ([]byte, error) {
	for _, side := range [2]struct {
		img    []any
		before bool
	}{{r.Before, true}, {r.After, false}} {
		if side.img == nil {
			b = append(b, unionNull)
			continue
		}
		b = append(b, unionValue1)
		var err error
		if b, err = c.writeImage(b, c.rowPlan, side.img, side.before, c.opts.Unchanged, fb); err != nil {
			return b, err
		}
	}
	b = c.writeSource(b, r, src)
	b = appendString(b, r.Op.String())
	at := src.ProcessedAt
	if at.IsZero() {
		at = time.Now()
	}
	b = append(b, unionValue1)
	b = appendLong(b, at.UnixMilli())
	if tx := src.Transaction; tx != nil {
		b = append(b, unionValue1)
		b = appendString(b, tx.ID)
		b = appendLong(b, tx.TotalOrder)
		b = appendLong(b, tx.DataCollectionOrder)
	} else {
		b = append(b, unionNull)
	}
	return b, nil
}

// nullUnion is the value hamba writes as the null branch of a union.
var nullUnion = map[string]any(nil)

// writeSource appends the envelope's Source record, with the fallbacks
// documented on SourceInfo.
func (c *Codec) writeSource(b []byte, r *pipeline.Record, s *SourceInfo) []byte {
	or := func(v, def string) string {
		if v != "" {
			return v
		}
		return def
	}
	snapshot := "false"
	if r.Op == pipeline.OpRead {
		snapshot = "true"
	}
	ts := s.TsMs
	if ts == 0 {
		ts = millis(r.EventTime)
	}
	id := c.table.ID
	b = appendString(b, s.Version)
	b = appendString(b, or(s.Connector, or(c.opts.ConnectorName, "sluice")))
	b = appendString(b, or(s.Name, c.opts.ServerName))
	b = appendLong(b, ts)
	b = appendString(b, or(s.Snapshot, snapshot))
	b = appendString(b, or(s.DB, or(id.Database, id.Schema)))
	if s.Sequence != nil {
		b = append(b, unionValue1)
		b = appendString(b, *s.Sequence)
	} else {
		b = append(b, unionNull)
	}
	b = appendString(b, or(s.Schema, id.Schema))
	b = appendString(b, or(s.Table, id.Table))
	switch {
	case s.TxID != nil:
		b = appendOptLong(b, s.TxID)
	case r.TxID != 0 && r.TxID <= math.MaxInt64:
		b = append(b, unionValue1)
		b = appendLong(b, int64(r.TxID))
	default:
		b = append(b, unionNull)
	}
	b = appendOptLong(b, s.LSN)
	return appendOptLong(b, s.Xmin)
}

func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func (c *Codec) check(r *pipeline.Record) error {
	if r == nil {
		return errors.New("schema: nil record")
	}
	if r.Table != c.table {
		name := "<nil>"
		if r.Table != nil {
			name = fmt.Sprintf("%s (generation %d)", r.Table.ID, r.Table.Generation)
		}
		return fmt.Errorf("schema: record of %s given to the codec of %s (generation %d)", name, c.table.ID, c.table.Generation)
	}
	return nil
}

// bufPool holds the scratch buffers records are written into; each result
// is copied out, so the caller owns it and the buffer is reused.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBuf keeps buffers grown by an exceptionally large record out of
// the pool.
const maxPooledBuf = 64 << 10

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

// finish returns a caller-owned copy of b (nil on error) and gives the
// scratch buffer back to the pool.
func finish(buf *[]byte, b []byte, err error) ([]byte, error) {
	var out []byte
	if err == nil {
		out = make([]byte, len(b))
		copy(out, b)
	}
	if cap(b) <= maxPooledBuf {
		*buf = b[:0]
		bufPool.Put(buf)
	}
	return out, err
}

// writeImage appends the record of plan (key or row image, without the
// metadata fields) for img. before enables the zero-value fallback for NULL
// in NOT NULL columns; listUnchanged adds the __sluice_unchanged field.
func (c *Codec) writeImage(b []byte, plan []colPlan, img []any, before, listUnchanged bool, fb TextFallback) ([]byte, error) {
	if len(img) != len(c.table.Columns) {
		return b, fmt.Errorf("schema: %s: image has %d values, the shape %d columns", c.table.ID, len(img), len(c.table.Columns))
	}
	unchanged := 0
	for i := range plan {
		p := &plan[i]
		v := img[p.idx]
		switch v.(type) {
		case nil:
			switch {
			case p.nullable:
				b = append(b, p.nullTag)
			case before:
				b = append(b, p.zeroEnc...)
			default:
				return b, c.encErr(p.col, v, errors.New("NULL in a NOT NULL column"))
			}
			continue
		case pipeline.Unchanged:
			if !c.opts.Unchanged || !listUnchanged || !p.nullable || p.col.Key {
				return b, c.encErr(p.col, v, errors.New("unchanged value not representable (Options.Unchanged is off, or a key column)"))
			}
			b = append(b, p.nullTag)
			unchanged++
			continue
		}
		mark := len(b)
		if p.nullable {
			b = append(b, p.valTag)
		}
		var err error
		if b, err = p.write(b, v); err != nil {
			if fb != nil && p.nullable && errors.Is(err, ErrNotRepresentable) {
				// The value is carried beside the payload (TextFallback).
				b = append(b[:mark], p.nullTag)
				fb(before, p.idx)
				continue
			}
			return b, c.encErr(p.col, v, err)
		}
	}
	if listUnchanged {
		// array<string> of the unchanged fields' names, in blocks as hamba
		// writes them.
		j := 0
		for done := 0; done < unchanged; {
			start := len(b)
			b = openBlock(b)
			n := 0
			for ; n < blockLength && done+n < unchanged; j++ {
				if _, ok := img[plan[j].idx].(pipeline.Unchanged); ok {
					b = appendString(b, plan[j].name)
					n++
				}
			}
			b = closeBlock(b, start, n)
			done += n
		}
		b = append(b, 0)
	}
	return b, nil
}

func (c *Codec) encErr(col *pipeline.Column, v any, err error) error {
	return &EncodeError{Table: c.table.ID, Column: col.Name, Type: col.Type, GoType: fmt.Sprintf("%T", v), Err: err}
}

// branchName is the name hamba uses for a union branch: the full name of a
// named type, else the type with its logical type ("long.timestamp-micros").
func branchName(s avro.Schema) string {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	name := string(s.Type())
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		name += "." + string(l.Logical().Type())
	}
	return name
}

// Cache keeps one Codec per table shape. It retains the newest MaxShapes
// shapes of each table (default 4); an evicted shape that shows up again is
// rebuilt. Safe for concurrent use.
type Cache struct {
	Options   Options
	MaxShapes int

	mu     sync.Mutex
	codecs map[*pipeline.Table]*Codec
	shapes map[pipeline.TableID][]*pipeline.Table
}

// NewCache returns an empty cache building codecs with opts.
func NewCache(opts Options) *Cache { return &Cache{Options: opts} }

// Codec returns the codec of t's shape, building it on first use.
func (c *Cache) Codec(t *pipeline.Table) (*Codec, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cd, ok := c.codecs[t]; ok {
		return cd, nil
	}
	cd, err := NewCodec(t, c.Options)
	if err != nil {
		return nil, err
	}
	if c.codecs == nil {
		c.codecs = map[*pipeline.Table]*Codec{}
		c.shapes = map[pipeline.TableID][]*pipeline.Table{}
	}
	max := c.MaxShapes
	if max <= 0 {
		max = 4
	}
	list := append(c.shapes[t.ID], t)
	for len(list) > max {
		delete(c.codecs, list[0])
		list = list[1:]
	}
	c.shapes[t.ID] = list
	c.codecs[t] = cd
	return cd, nil
}

// zeroValue is the pipeline value whose encoding stands in for a column a
// before image did not carry.
func zeroValue(t pipeline.Type) any {
	switch t {
	case pipeline.TypeBool:
		return false
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		return int64(0)
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		return uint64(0)
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		return float64(0)
	case pipeline.TypeDecimal:
		return pipeline.Decimal{Unscaled: new(big.Int)}
	case pipeline.TypeJSON:
		return pipeline.JSON("{}")
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return []byte{}
	case pipeline.TypeUUID:
		return pipeline.UUID{}
	case pipeline.TypeDate:
		return pipeline.Date{}
	case pipeline.TypeTime:
		return pipeline.TimeOfDay(0)
	case pipeline.TypeTimeTZ:
		return pipeline.TimeTZ{}
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		return pipeline.Timestamp{}
	case pipeline.TypeInterval:
		return pipeline.Interval{}
	case pipeline.TypeArray:
		return []any{}
	}
	return ""
}

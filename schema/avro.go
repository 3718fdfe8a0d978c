package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hamba/avro/v2"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
)

// Options shape the schemas of every table of one connector.
type Options struct {
	// ConnectorName is the source kind ("postgresql", "mysql"): the envelope's
	// source.connector and the namespace of its Source record
	// (io.debezium.connector.<ConnectorName>.Source). Empty means "sluice".
	ConnectorName string
	// ServerName is the topic prefix: the first component of every record
	// namespace and the envelope's source.name. Empty leaves it out.
	ServerName string
	// Unchanged makes unchanged TOAST values representable: every non-key
	// value field becomes nullable (default null) and the row records get a
	// __sluice_unchanged field (array of string, default []) listing the
	// fields whose value was not sent, so a consumer can tell "unchanged"
	// from NULL. Without it, a pipeline.Unchanged value fails to encode.
	Unchanged bool
}

// Names of the fields this package adds to row records.
const (
	FieldOp          = "__op"               // string: c, u, d, r (Value only)
	FieldVersion     = "__version"          // string: pipeline.Version.String() (Value only)
	FieldDeleted     = "__deleted"          // boolean: true for deletes (Value only)
	FieldSourceTsMs  = "__source_ts_ms"     // long: source commit time, ms since the epoch (Value only)
	FieldUnchanged   = "__sluice_unchanged" // array<string>: fields not sent (with Options.Unchanged)
	IntervalFullName = "sluice.Interval"    // record {months:int, days:int, micros:long}
	VarDecimalName   = "io.debezium.data.VariableScaleDecimal"
)

// Properties carried by the column fields of every record.
const (
	PropSourceType = "sluice.source_type" // Column.SourceType, when set
	PropComment    = "sluice.comment"     // Column.Comment, when set (also the field's doc)
	PropKey        = "sluice.key"         // true on key columns
	PropNullable   = "sluice.nullable"    // Column.Nullable, as the source declared it
	PropColumn     = "sluice.column"      // the original column name, when SanitizeName changed it
	// PropMissing is an added column's missing value (pipeline.Column.
	// Missing) in its text form (pipeline/textform), when the field cannot
	// have it as its Avro default (see missingDefault).
	PropMissing = "sluice.missing"
)

// ErrNoKey is returned for the key schema of a table without key columns;
// such tables are written with a null Kafka key.
var ErrNoKey = errors.New("schema: table has no key columns")

// KeySchema returns the record <ns>.Key holding the key columns of t in key
// order (ErrNoKey when t has none).
//
// Column types map as follows (nullable columns become ["null", T] with
// default null; so do all non-key value columns with Options.Unchanged):
//
//	int16                  int, property connect.type=int16
//	int32, uint8, uint16   int
//	int64, uint32          long
//	uint64                 bytes, logicalType decimal(20,0): lossless
//	float32 / float64      float / double
//	decimal(p,s), p>0      bytes, logicalType decimal, precision max(p,s), scale s
//	                       (a negative scale s gives decimal(p-s, 0))
//	numeric (p=0)          record io.debezium.data.VariableScaleDecimal
//	                       {scale:int, value:bytes (two's complement unscaled)}
//	                       NaN and ±Infinity have no representation: encoding
//	                       them fails, so the runtime dead-letters the record
//	bool                   boolean
//	string, text, inet,    string
//	macaddr
//	enum / set             string, connect.name io.debezium.data.Enum / EnumSet
//	                       and connect.parameters.allowed = the labels joined by
//	                       ",": a string, not an Avro enum, so new labels stay
//	                       compatible
//	bytes, bit, geometry   bytes (geometry as WKB)
//	uuid                   string, logicalType uuid
//	json                   string, connect.name io.debezium.data.Json
//	date                   int, logicalType date
//	time                   long, logicalType time-micros (24:00:00 is 86400000000)
//	timetz                 string "15:04:05.000000+05:30" (offset kept),
//	                       connect.name io.debezium.time.ZonedTime
//	timestamp              long, logicalType local-timestamp-micros
//	timestamptz            long, logicalType timestamp-micros (UTC)
//	interval               record sluice.Interval {months:int, days:int, micros:long}
//	array                  array, items ["null", element type]
//
// Infinite dates and timestamps are clamped: +infinity encodes as 9999-12-31
// (9999-12-31T23:59:59.999999), -infinity as 0001-01-01 (0001-01-01T00:00:00),
// and decoding maps exactly those values back to the infinities.
// Multi-dimensional array values (nested []any) fail to encode.
func KeySchema(t *pipeline.Table, opts Options) (avro.Schema, error) {
	b, err := newBuilder(t, opts)
	if err != nil {
		return nil, err
	}
	if len(t.KeyIdx) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoKey, t.ID)
	}
	fields := make([]*avro.Field, 0, len(t.KeyIdx))
	for _, i := range t.KeyIdx {
		if i < 0 || i >= len(t.Columns) {
			return nil, fmt.Errorf("schema: %s: key index %d out of range", t.ID, i)
		}
		f, err := b.columnField(i, false)
		if err != nil {
			return nil, err
		}
		fields = append(fields, f)
	}
	return b.record("Key", b.ns, fields)
}

// ValueSchema returns the record <ns>.Value: every column of t in column
// order, then __sluice_unchanged (with Options.Unchanged), then the metadata
// fields __op (string), __version (string), __deleted (boolean) and
// __source_ts_ms (long). See KeySchema for the type mapping.
func ValueSchema(t *pipeline.Table, opts Options) (avro.Schema, error) {
	b, err := newBuilder(t, opts)
	if err != nil {
		return nil, err
	}
	return b.rowRecord(true)
}

// EnvelopeSchema returns the Debezium-style record <ns>.Envelope:
//
//	before       ["null", <ns>.Value] default null (row image, no metadata fields)
//	after        ["null", <ns>.Value] default null
//	source       io.debezium.connector.<connector>.Source {version, connector,
//	             name, ts_ms, snapshot ("true"/"false"/"last"), db, sequence
//	             (nullable string), schema, table, txId, lsn, xmin (nullable longs)}
//	op           string: c, u, d, r or t
//	ts_ms        ["null", long] default null: when sluice processed the change
//	transaction  ["null", event.block {id, total_order, data_collection_order}]
//
// The inner Value record shares its full name with ValueSchema's record but
// lacks the metadata fields; the two are never part of one schema.
func EnvelopeSchema(t *pipeline.Table, opts Options) (avro.Schema, error) {
	b, err := newBuilder(t, opts)
	if err != nil {
		return nil, err
	}
	row, err := b.rowRecord(false)
	if err != nil {
		return nil, err
	}
	src, err := b.sourceRecord()
	if err != nil {
		return nil, err
	}
	block, err := b.record("block", "event", []*avro.Field{
		mustField("id", prim(avro.String)),
		mustField("total_order", prim(avro.Long)),
		mustField("data_collection_order", prim(avro.Long)),
	})
	if err != nil {
		return nil, err
	}
	fields := []*avro.Field{
		nullableField("before", b.named(row)),
		nullableField("after", b.named(row)),
		mustField("source", b.named(src)),
		mustField("op", prim(avro.String)),
		nullableField("ts_ms", prim(avro.Long)),
		nullableField("transaction", b.named(block)),
	}
	return b.record("Envelope", b.ns, fields)
}

// SchemaText is the JSON to register for s: unlike s.String() (Avro's
// parsing canonical form) it keeps defaults, logical types, docs and custom
// properties, which a registry uses for its compatibility checks. Properties
// are written in sorted order, so equal schemas give equal text.
func SchemaText(s avro.Schema) (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("schema: marshal: %w", err)
	}
	return string(b), nil
}

// ParseSchemaText parses schema JSON with a private name cache, so that it
// neither reads nor pollutes hamba's global cache (where two shapes of one
// table, sharing record names, would collide).
func ParseSchemaText(text string) (avro.Schema, error) {
	return avro.ParseWithCache(text, "", &avro.SchemaCache{})
}

type builder struct {
	t       *pipeline.Table
	opts    Options
	ns      string
	defined map[string]bool
}

func newBuilder(t *pipeline.Table, opts Options) (*builder, error) {
	if t == nil {
		return nil, errors.New("schema: nil table")
	}
	ns := Namespace(opts.ServerName, t.ID)
	if ns == "" {
		return nil, fmt.Errorf("schema: table %q: empty namespace", t.ID)
	}
	return &builder{t: t, opts: opts, ns: ns, defined: map[string]bool{}}, nil
}

// named returns s the first time its name is used in the schema being built
// and a reference afterwards: Avro allows one definition per full name.
func (b *builder) named(s avro.NamedSchema) avro.Schema {
	if b.defined[s.FullName()] {
		return avro.NewRefSchema(s)
	}
	b.defined[s.FullName()] = true
	return s
}

func (b *builder) record(name, ns string, fields []*avro.Field) (*avro.RecordSchema, error) {
	r, err := avro.NewRecordSchema(name, ns, fields, avro.WithProps(map[string]any{"connect.name": ns + "." + name}))
	if err != nil {
		return nil, fmt.Errorf("schema: %s: record %s.%s: %w", b.t.ID, ns, name, err)
	}
	return r, nil
}

// rowRecord builds <ns>.Value: the columns, __sluice_unchanged with
// Options.Unchanged, and the metadata fields when withMeta.
func (b *builder) rowRecord(withMeta bool) (*avro.RecordSchema, error) {
	fields := make([]*avro.Field, 0, len(b.t.Columns)+5)
	for i, c := range b.t.Columns {
		f, err := b.columnField(i, b.opts.Unchanged && !c.Key)
		if err != nil {
			return nil, err
		}
		fields = append(fields, f)
	}
	if b.opts.Unchanged {
		f, err := avro.NewField(FieldUnchanged, avro.NewArraySchema(prim(avro.String)), avro.WithDefault([]any{}),
			avro.WithDoc("fields whose value did not change and was not sent (unchanged TOAST); their value here is null"))
		if err != nil {
			return nil, fmt.Errorf("schema: %s: %w", b.t.ID, err)
		}
		fields = append(fields, f)
	}
	if withMeta {
		fields = append(fields,
			mustField(FieldOp, prim(avro.String)),
			mustField(FieldVersion, prim(avro.String)),
			mustField(FieldDeleted, prim(avro.Boolean)),
			mustField(FieldSourceTsMs, prim(avro.Long)))
	}
	seen := make(map[string]string, len(fields))
	for i, f := range fields {
		orig := f.Name()
		if i < len(b.t.Columns) {
			orig = b.t.Columns[i].Name
		}
		if prev, dup := seen[f.Name()]; dup {
			return nil, fmt.Errorf("schema: %s: columns %q and %q both map to Avro field %q", b.t.ID, prev, orig, f.Name())
		}
		seen[f.Name()] = orig
	}
	return b.record("Value", b.ns, fields)
}

func (b *builder) sourceRecord() (*avro.RecordSchema, error) {
	connector := b.opts.ConnectorName
	if connector == "" {
		connector = "sluice"
	}
	snapshot := avro.NewPrimitiveSchema(avro.String, nil, avro.WithProps(map[string]any{
		"connect.name":       "io.debezium.data.Enum",
		"connect.parameters": map[string]any{"allowed": "true,last,false,incremental"},
		"connect.default":    "false",
	}))
	snap, err := avro.NewField("snapshot", snapshot, avro.WithDefault("false"))
	if err != nil {
		return nil, err
	}
	fields := []*avro.Field{
		mustField("version", prim(avro.String)),
		mustField("connector", prim(avro.String)),
		mustField("name", prim(avro.String)),
		mustField("ts_ms", prim(avro.Long)),
		snap,
		mustField("db", prim(avro.String)),
		nullableField("sequence", prim(avro.String)),
		mustField("schema", prim(avro.String)),
		mustField("table", prim(avro.String)),
		nullableField("txId", prim(avro.Long)),
		nullableField("lsn", prim(avro.Long)),
		nullableField("xmin", prim(avro.Long)),
	}
	return b.record("Source", "io.debezium.connector."+SanitizeName(connector), fields)
}

// columnField builds the field of column i; forceNullable makes it nullable
// whatever the column declares.
func (b *builder) columnField(i int, forceNullable bool) (*avro.Field, error) {
	c := &b.t.Columns[i]
	typ, err := b.columnType(c, c.Type, false)
	if err != nil {
		return nil, err
	}
	name := SanitizeName(c.Name)
	props := map[string]any{PropNullable: c.Nullable}
	if c.SourceType != "" {
		props[PropSourceType] = c.SourceType
	}
	if c.Comment != "" {
		props[PropComment] = c.Comment
	}
	if c.Key {
		props[PropKey] = true
	}
	if name != c.Name {
		props[PropColumn] = c.Name
	}
	def, hasDefault := b.missingDefault(c, typ)
	if c.Missing != nil && !hasDefault {
		if text, err := textform.Encode(c, c.Missing); err == nil {
			props[PropMissing] = text
		}
	}
	opts := []avro.SchemaOption{avro.WithProps(props)}
	if c.Comment != "" {
		opts = append(opts, avro.WithDoc(c.Comment))
	}
	if hasDefault {
		// Older events lack the column; read with this schema they hold
		// its missing value, as the rows do. A union's default is its
		// first branch, so the type goes first.
		if c.Nullable || forceNullable {
			u, err := avro.NewUnionSchema([]avro.Schema{typ, prim(avro.Null)})
			if err != nil {
				return nil, b.colErr(c, err)
			}
			typ = u
		}
		opts = append(opts, avro.WithDefault(def))
	} else if c.Nullable || forceNullable {
		u, err := avro.NewUnionSchema([]avro.Schema{prim(avro.Null), typ})
		if err != nil {
			return nil, b.colErr(c, err)
		}
		typ = u
		opts = append(opts, avro.WithDefault(nil))
	}
	f, err := avro.NewField(name, typ, opts...)
	if err != nil {
		return nil, b.colErr(c, err)
	}
	return f, nil
}

func (b *builder) colErr(c *pipeline.Column, err error) error {
	return fmt.Errorf("schema: %s column %q (%s): %w", b.t.ID, c.Name, c.Type, err)
}

// columnType maps a column type (or, inArray, an array's element type) to
// its Avro schema; see KeySchema for the table.
func (b *builder) columnType(c *pipeline.Column, typ pipeline.Type, inArray bool) (avro.Schema, error) {
	switch typ {
	case pipeline.TypeInt16:
		return avro.NewPrimitiveSchema(avro.Int, nil, avro.WithProps(map[string]any{"connect.type": "int16"})), nil
	case pipeline.TypeInt32, pipeline.TypeUint8, pipeline.TypeUint16:
		return prim(avro.Int), nil
	case pipeline.TypeInt64, pipeline.TypeUint32:
		return prim(avro.Long), nil
	case pipeline.TypeUint64:
		return avro.NewPrimitiveSchema(avro.Bytes, avro.NewDecimalLogicalSchema(20, 0)), nil
	case pipeline.TypeFloat32:
		return prim(avro.Float), nil
	case pipeline.TypeFloat64:
		return prim(avro.Double), nil
	case pipeline.TypeDecimal:
		if p, s, fixed := decimalShape(c); fixed {
			return avro.NewPrimitiveSchema(avro.Bytes, avro.NewDecimalLogicalSchema(p, s)), nil
		}
		r, err := avro.NewRecordSchema("VariableScaleDecimal", "io.debezium.data", []*avro.Field{
			mustField("scale", prim(avro.Int)),
			mustField("value", prim(avro.Bytes)),
		}, avro.WithDoc("Variable scaled decimal"), avro.WithProps(map[string]any{"connect.name": VarDecimalName}))
		if err != nil {
			return nil, b.colErr(c, err)
		}
		return b.named(r), nil
	case pipeline.TypeBool:
		return prim(avro.Boolean), nil
	case pipeline.TypeString, pipeline.TypeText, pipeline.TypeInet, pipeline.TypeMacaddr:
		return prim(avro.String), nil
	case pipeline.TypeEnum, pipeline.TypeSet:
		name := "io.debezium.data.Enum"
		if typ == pipeline.TypeSet {
			name = "io.debezium.data.EnumSet"
		}
		return avro.NewPrimitiveSchema(avro.String, nil, avro.WithProps(map[string]any{
			"connect.name":       name,
			"connect.parameters": map[string]any{"allowed": strings.Join(c.Enum, ",")},
		})), nil
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return prim(avro.Bytes), nil
	case pipeline.TypeUUID:
		return avro.NewPrimitiveSchema(avro.String, avro.NewPrimitiveLogicalSchema(avro.UUID)), nil
	case pipeline.TypeJSON:
		return avro.NewPrimitiveSchema(avro.String, nil, avro.WithProps(map[string]any{"connect.name": "io.debezium.data.Json"})), nil
	case pipeline.TypeDate:
		return avro.NewPrimitiveSchema(avro.Int, avro.NewPrimitiveLogicalSchema(avro.Date)), nil
	case pipeline.TypeTime:
		return avro.NewPrimitiveSchema(avro.Long, avro.NewPrimitiveLogicalSchema(avro.TimeMicros)), nil
	case pipeline.TypeTimeTZ:
		return avro.NewPrimitiveSchema(avro.String, nil, avro.WithProps(map[string]any{"connect.name": "io.debezium.time.ZonedTime"})), nil
	case pipeline.TypeTimestamp:
		return avro.NewPrimitiveSchema(avro.Long, avro.NewPrimitiveLogicalSchema(avro.LocalTimestampMicros)), nil
	case pipeline.TypeTimestampTZ:
		return avro.NewPrimitiveSchema(avro.Long, avro.NewPrimitiveLogicalSchema(avro.TimestampMicros)), nil
	case pipeline.TypeInterval:
		r, err := avro.NewRecordSchema("Interval", "sluice", []*avro.Field{
			mustField("months", prim(avro.Int)),
			mustField("days", prim(avro.Int)),
			mustField("micros", prim(avro.Long)),
		}, avro.WithDoc("interval kept by field: months, days and microseconds"))
		if err != nil {
			return nil, b.colErr(c, err)
		}
		return b.named(r), nil
	case pipeline.TypeArray:
		if inArray {
			return nil, b.colErr(c, errors.New("array element type cannot be an array"))
		}
		elem, err := b.columnType(c, c.Elem, true)
		if err != nil {
			return nil, err
		}
		items, err := avro.NewUnionSchema([]avro.Schema{prim(avro.Null), elem})
		if err != nil {
			return nil, b.colErr(c, err)
		}
		return avro.NewArraySchema(items), nil
	}
	return nil, b.colErr(c, fmt.Errorf("unsupported type %s", typ))
}

// decimalShape returns the Avro precision and scale of a decimal column, or
// fixed=false for an unconstrained numeric (Precision 0).
func decimalShape(c *pipeline.Column) (prec, scale int, fixed bool) {
	if c.Precision <= 0 {
		return 0, 0, false
	}
	prec, scale = c.Precision, c.Scale
	if scale < 0 { // numeric(p, -s): integers with s trailing zeros
		prec, scale = prec-scale, 0
	}
	if scale > prec { // numeric(3,5): Avro wants scale <= precision
		prec = scale
	}
	return prec, scale, true
}

func prim(t avro.Type) *avro.PrimitiveSchema { return avro.NewPrimitiveSchema(t, nil) }

// mustField builds a field whose name and default are constants of this
// package; a failure is a programming error.
func mustField(name string, typ avro.Schema, opts ...avro.SchemaOption) *avro.Field {
	f, err := avro.NewField(name, typ, opts...)
	if err != nil {
		panic(err)
	}
	return f
}

// nullableField builds name: ["null", typ] with default null.
func nullableField(name string, typ avro.Schema) *avro.Field {
	u, err := avro.NewUnionSchema([]avro.Schema{prim(avro.Null), typ})
	if err != nil {
		panic(err)
	}
	return mustField(name, u, avro.WithDefault(nil))
}

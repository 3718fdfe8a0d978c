package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// SessionSettings are the settings every connection that produces or
// compares values (the replication connection and the snapshot readers)
// must run with, as startup runtime parameters. pgoutput prints values with
// the walsender's settings, so the stream and the snapshot only agree on
// timestamptz, date, interval, float and bytea text when both pin them.
// DecodeText assumes them.
var SessionSettings = map[string]string{
	"TimeZone":           "UTC",
	"DateStyle":          "ISO",
	"IntervalStyle":      "postgres",
	"extra_float_digits": "3",
	"bytea_output":       "hex",
}

// Querier runs catalog queries; *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy
// it. It must be a normal (non-replication) connection.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TableRef names a table in the catalog.
type TableRef struct {
	Schema, Name string
}

// TableShape is one shape of a captured table: the record-model table plus
// what decoding its values needs. Columns is aligned with Table.Columns.
// Shapes are immutable once built.
type TableShape struct {
	Table       *pipeline.Table
	Columns     []ColumnInfo
	RelationOID uint32
	// ReplicaIdentity is pg_class.relreplident: 'd' default (primary key),
	// 'f' full, 'i' index, 'n' nothing.
	ReplicaIdentity byte
	HasPrimaryKey   bool
	// DeferrableKey is true when the primary key is DEFERRABLE: inside a
	// transaction two rows may then share a key for a while, and the
	// decoder re-reads the keys such moves leave in doubt (doubt.go).
	DeferrableKey bool
	// signature identifies the Relation message the shape was built from,
	// so a resent identical Relation keeps the shape (and its Generation).
	signature string
}

// ErrTableNotFound is returned by LoadTableShape for a missing table.
var ErrTableNotFound = errors.New("table not found")

// LoadTableShape reads a table's shape from the catalog of the database q
// is connected to. Columns are the ones pgoutput publishes by default: not
// dropped and not generated, in attnum order. Key columns are the primary
// key (in key order), else the columns of the replica identity index; a
// table with neither has no key. The shape has Generation 1.
func LoadTableShape(ctx context.Context, q Querier, database string, rel TableRef) (*TableShape, error) {
	s := &TableShape{}
	var ident string
	err := q.QueryRow(ctx, `SELECT c.oid, c.relreplident::text FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r','p')`,
		rel.Schema, rel.Name).Scan(&s.RelationOID, &ident)
	name := rel.Schema + "." + rel.Name
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrTableNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("load shape of %s: %w", name, err)
	}
	if ident != "" {
		s.ReplicaIdentity = ident[0]
	}
	type attr struct {
		num            int16
		name, fmt, cmt string
		oid            uint32
		typmod         int32
		notNull        bool
		missing        *string
	}
	rows, err := q.Query(ctx, `SELECT a.attnum, a.attname, a.atttypid, a.atttypmod, a.attnotnull,
			pg_catalog.format_type(a.atttypid, a.atttypmod),
			coalesce(pg_catalog.col_description(a.attrelid, a.attnum), ''),
			CASE WHEN a.atthasmissing THEN a.attmissingval::text END
		FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum`, s.RelationOID)
	if err != nil {
		return nil, fmt.Errorf("load columns of %s: %w", name, err)
	}
	var attrs []attr
	for rows.Next() {
		var a attr
		if err := rows.Scan(&a.num, &a.name, &a.oid, &a.typmod, &a.notNull, &a.fmt, &a.cmt, &a.missing); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load columns of %s: %w", name, err)
		}
		attrs = append(attrs, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load columns of %s: %w", name, err)
	}
	var pk, identIdx []int16
	rows, err = q.Query(ctx, `SELECT i.indisprimary, i.indisreplident, i.indkey::int2[],
			EXISTS (SELECT 1 FROM pg_catalog.pg_constraint c WHERE c.conindid = i.indexrelid AND c.condeferrable)
		FROM pg_catalog.pg_index i WHERE i.indrelid = $1 AND (i.indisprimary OR i.indisreplident)`, s.RelationOID)
	if err != nil {
		return nil, fmt.Errorf("load keys of %s: %w", name, err)
	}
	for rows.Next() {
		var primary, replident, deferrable bool
		var keys []int16
		if err := rows.Scan(&primary, &replident, &keys, &deferrable); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load keys of %s: %w", name, err)
		}
		if primary {
			pk = keys
			// A replica identity index cannot be deferrable: only the
			// primary key can be.
			s.DeferrableKey = deferrable
		}
		if replident {
			identIdx = keys
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load keys of %s: %w", name, err)
	}
	s.HasPrimaryKey = pk != nil
	keyAttnums := pk
	if keyAttnums == nil && s.ReplicaIdentity == 'i' {
		keyAttnums = identIdx
	}

	res := NewTypeResolver(q, nil)
	t := &pipeline.Table{ID: pipeline.TableID{Database: database, Schema: rel.Schema, Table: rel.Name}, Generation: 1,
		FullBefore: s.ReplicaIdentity == 'f'}
	pos := map[int16]int{}
	for i, a := range attrs {
		info, err := res.ResolveType(ctx, a.oid)
		if err != nil {
			return nil, fmt.Errorf("load shape of %s: column %q: %w", name, a.name, err)
		}
		ci := ColumnInfo{Name: a.name, OID: a.oid, TypMod: a.typmod, Type: info}
		col := columnFor(ci)
		col.Nullable = !a.notNull
		col.SourceType = a.fmt
		col.Comment = a.cmt
		if a.missing != nil {
			// attmissingval is a one-element array of the column's type.
			v, err := decodeTextAs(&TypeInfo{Elem: &ci.Type, Delim: ci.Type.Delim}, *a.missing, 0)
			if arr, ok := v.([]any); err == nil && ok && len(arr) == 1 {
				col.Missing = arr[0]
			} else {
				return nil, fmt.Errorf("load shape of %s: column %q: missing value %q: %v", name, a.name, *a.missing, err)
			}
		}
		t.Columns = append(t.Columns, col)
		s.Columns = append(s.Columns, ci)
		pos[a.num] = i
	}
	for _, k := range keyAttnums {
		if i, ok := pos[k]; ok {
			t.Columns[i].Key = true
			t.KeyIdx = append(t.KeyIdx, i)
		}
	}
	s.Table = t
	return s, nil
}

// columnFor builds the record-model column of a resolved column: type,
// element type, precision/scale from the typmod, enum labels and a
// SourceType close to format_type (LoadTableShape overwrites it with the
// server's own). Nullable defaults to true.
func columnFor(ci ColumnInfo) pipeline.Column {
	typ, elem := ci.Type.PipelineType()
	col := pipeline.Column{Name: ci.Name, Type: typ, Elem: elem, Nullable: true, SourceType: ci.Type.Name}
	target := ci.Type.decodeTarget()
	if target.Elem != nil {
		target = target.Elem.decodeTarget()
		col.SourceType = strings.TrimPrefix(ci.Type.Name, "_") + "[]"
	}
	typmod := ci.TypMod
	if typmod < 0 && ci.Type.Base != nil {
		typmod = ci.Type.BaseTypMod
	}
	switch target.OID {
	case pgtype.NumericOID:
		col.Scale = -1
		if typmod >= 4 {
			col.Precision = int(((typmod - 4) >> 16) & 0xffff)
			col.Scale = int((((typmod - 4) & 0x7ff) ^ 1024) - 1024)
			if ci.Type.Elem == nil && ci.Type.Base == nil {
				col.SourceType = fmt.Sprintf("numeric(%d,%d)", col.Precision, col.Scale)
			}
		}
	case pgtype.VarcharOID, pgtype.BPCharOID:
		if typmod >= 4 {
			col.Precision = int(typmod - 4)
			if ci.Type.Elem == nil && ci.Type.Base == nil {
				col.SourceType = fmt.Sprintf("%s(%d)", map[uint32]string{pgtype.VarcharOID: "character varying", pgtype.BPCharOID: "character"}[target.OID], col.Precision)
			}
		}
	}
	if target.Kind == 'e' {
		col.Enum = append([]string(nil), target.Enum...)
	}
	return col
}

// relationSignature identifies a Relation message's content.
func relationSignature(rel *pglogrepl.RelationMessage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%s|%s|%c", rel.RelationID, rel.Namespace, rel.RelationName, rel.ReplicaIdentity)
	for _, c := range rel.Columns {
		fmt.Fprintf(&b, "|%d:%s:%d:%d", c.Flags, c.Name, c.DataType, c.TypeModifier)
	}
	return b.String()
}

// WithRelation builds the next shape of the table from a Relation message:
// Generation is s's plus one; columns, type OIDs, typmods and key flags
// come from the message, and each column that still matches a column of s
// (same name, type OID and typmod) keeps s's decode info and metadata
// (nullability, comment, SourceType). Types of other columns are resolved
// through r. Key columns are s's key when every one of them is still
// present; otherwise the message's key flags (which under REPLICA IDENTITY
// FULL mark every column and are then not taken as a key).
func (s *TableShape) WithRelation(ctx context.Context, rel *pglogrepl.RelationMessage, r TypeResolver) (*TableShape, error) {
	return ShapeFromRelation(ctx, s.Table.ID.Database, rel, s, r, s.Table.Generation+1)
}

// ShapeFromRelation builds a shape from a Relation message with the given
// Generation, enriched by base when base is not nil (see WithRelation).
func ShapeFromRelation(ctx context.Context, database string, rel *pglogrepl.RelationMessage, base *TableShape, r TypeResolver, generation int) (*TableShape, error) {
	s := &TableShape{RelationOID: rel.RelationID, ReplicaIdentity: rel.ReplicaIdentity, signature: relationSignature(rel)}
	t := &pipeline.Table{ID: pipeline.TableID{Database: database, Schema: rel.Namespace, Table: rel.RelationName}, Generation: generation,
		FullBefore: rel.ReplicaIdentity == 'f'}
	byName := map[string]int{}
	if base != nil {
		s.HasPrimaryKey = base.HasPrimaryKey
		for i, c := range base.Columns {
			byName[c.Name] = i
		}
	}
	flagged := []int{}
	matched := map[int]int{} // base column index → new column index
	for i, rc := range rel.Columns {
		var ci ColumnInfo
		var col pipeline.Column
		if j, ok := byName[rc.Name]; ok && base.Columns[j].OID == rc.DataType && base.Columns[j].TypMod == rc.TypeModifier {
			ci, col = base.Columns[j], base.Table.Columns[j]
			col.Key = false
			matched[j] = i
		} else {
			if r == nil {
				return nil, fmt.Errorf("relation %s.%s: no type resolver for column %q", rel.Namespace, rel.RelationName, rc.Name)
			}
			info, err := r.ResolveType(ctx, rc.DataType)
			if err != nil {
				return nil, fmt.Errorf("relation %s.%s: column %q: %w", rel.Namespace, rel.RelationName, rc.Name, err)
			}
			ci = ColumnInfo{Name: rc.Name, OID: rc.DataType, TypMod: rc.TypeModifier, Type: info}
			col = columnFor(ci)
		}
		if rc.Flags&1 != 0 {
			flagged = append(flagged, i)
		}
		s.Columns = append(s.Columns, ci)
		t.Columns = append(t.Columns, col)
	}
	var keys []int
	if base != nil && len(base.Table.KeyIdx) > 0 {
		for _, j := range base.Table.KeyIdx {
			i, ok := matched[j]
			if !ok {
				keys = nil
				break
			}
			keys = append(keys, i)
		}
		s.DeferrableKey = keys != nil && base.DeferrableKey
	}
	if keys == nil && rel.ReplicaIdentity != 'f' {
		keys = flagged
		if base == nil {
			s.HasPrimaryKey = rel.ReplicaIdentity == 'd' && len(flagged) > 0
		}
	}
	for _, i := range keys {
		t.Columns[i].Key = true
	}
	if len(keys) > 0 {
		t.KeyIdx = append([]int(nil), keys...)
	}
	s.Table = t
	return s, nil
}

// CatalogResolver is the catalog-backed TypeResolver: built-in types come
// from pgx's registry without a query, others from pg_type (enum labels,
// domain base types, array element types). Answers are cached; Forget
// drops one. It is safe for concurrent use, but q itself is used by one
// query at a time.
type CatalogResolver struct {
	q   Querier
	log *zap.Logger
	mu  sync.Mutex
	qmu sync.Mutex
	c   map[uint32]TypeInfo
}

// NewTypeResolver returns a resolver querying q (nil: built-in types only).
// log, when not nil, gets one note per type that is passed on as text.
func NewTypeResolver(q Querier, log *zap.Logger) *CatalogResolver {
	return &CatalogResolver{q: q, log: log, c: map[uint32]TypeInfo{}}
}

// Forget drops the cached answer for oid (after a Type message or DDL).
func (r *CatalogResolver) Forget(oid uint32) {
	r.mu.Lock()
	delete(r.c, oid)
	r.mu.Unlock()
}

// ResolveType implements TypeResolver.
func (r *CatalogResolver) ResolveType(ctx context.Context, oid uint32) (TypeInfo, error) {
	info, err := r.resolve(ctx, oid, 0)
	if err == nil {
		noteTextFallback(r.log, &info)
	}
	return info, err
}

func (r *CatalogResolver) resolve(ctx context.Context, oid uint32, depth int) (TypeInfo, error) {
	if info, ok := builtinTypeInfo(oid); ok {
		return info, nil
	}
	r.mu.Lock()
	info, ok := r.c[oid]
	r.mu.Unlock()
	if ok {
		return info, nil
	}
	if r.q == nil {
		return TypeInfo{}, fmt.Errorf("type oid %d is not built in and no catalog connection is available", oid)
	}
	if depth > 16 {
		return TypeInfo{}, fmt.Errorf("type oid %d: type nesting too deep", oid)
	}
	var kind, category, delim string
	var elem, base uint32
	var labels []string
	r.qmu.Lock()
	err := r.q.QueryRow(ctx, `SELECT n.nspname, t.typname, t.typtype::text, t.typcategory::text, t.typelem,
			t.typbasetype, t.typtypmod,
			coalesce((SELECT d.typdelim::text FROM pg_catalog.pg_type d WHERE d.oid = t.typelem), ','),
			coalesce((SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
				FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid), '{}')
		FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
		WHERE t.oid = $1`, oid).Scan(&info.Namespace, &info.Name, &kind, &category, &elem,
		&base, &info.BaseTypMod, &delim, &labels)
	r.qmu.Unlock()
	if errors.Is(err, pgx.ErrNoRows) {
		return TypeInfo{}, fmt.Errorf("type oid %d not found in pg_type", oid)
	}
	if err != nil {
		return TypeInfo{}, fmt.Errorf("resolve type oid %d: %w", oid, err)
	}
	info.OID = oid
	info.Kind = kind[0]
	switch {
	case info.Kind == 'e':
		info.Enum = labels
	case info.Kind == 'd' && base != 0:
		b, err := r.resolve(ctx, base, depth+1)
		if err != nil {
			return TypeInfo{}, err
		}
		info.Base = &b
	case category == "A" && elem != 0 && !strings.HasPrefix(info.Name, "int2vector") && !strings.HasPrefix(info.Name, "oidvector"):
		e, err := r.resolve(ctx, elem, depth+1)
		if err != nil {
			return TypeInfo{}, err
		}
		info.Elem = &e
		info.Delim = ','
		if delim != "" {
			info.Delim = delim[0]
		}
	}
	r.mu.Lock()
	r.c[oid] = info
	r.mu.Unlock()
	return info, nil
}

// builtinTypes is pgx's registry of built-in types; it is read-only here.
var builtinTypes = pgtype.NewMap()

// builtinTypeInfo answers the built-in types pgx knows, without a query.
func builtinTypeInfo(oid uint32) (TypeInfo, bool) {
	switch oid {
	case 22, 30: // int2vector, oidvector: space-separated, not array text
		return TypeInfo{OID: oid, Namespace: "pg_catalog", Name: map[uint32]string{22: "int2vector", 30: "oidvector"}[oid], Kind: 'b'}, true
	}
	t, ok := builtinTypes.TypeForOID(oid)
	if !ok {
		return TypeInfo{}, false
	}
	info := TypeInfo{OID: oid, Namespace: "pg_catalog", Name: t.Name, Kind: 'b'}
	if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok && ac.ElementType != nil {
		elem, ok := builtinTypeInfo(ac.ElementType.OID)
		if !ok {
			return TypeInfo{}, false
		}
		info.Elem = &elem
		info.Delim = ','
		if elem.OID == pgtype.BoxOID {
			info.Delim = ';'
		}
	}
	switch oid {
	case pgtype.RecordOID:
		info.Kind = 'p'
	case pgtype.Int4rangeOID, pgtype.Int8rangeOID, pgtype.NumrangeOID, pgtype.TsrangeOID,
		pgtype.TstzrangeOID, pgtype.DaterangeOID:
		info.Kind = 'r'
	}
	return info, true
}

// builtinTypeByName finds a built-in type by its pg_catalog name.
func builtinTypeByName(name string) (TypeInfo, bool) {
	t, ok := builtinTypes.TypeForName(name)
	if !ok {
		return TypeInfo{}, false
	}
	return builtinTypeInfo(t.OID)
}

// decoderResolver resolves types through DecoderOptions.Resolver, falling
// back to built-in types and the server's Type messages: pgoutput names a
// domain by its base type, so domains over built-in types still decode.
type decoderResolver struct{ d *Decoder }

func (r *decoderResolver) ResolveType(ctx context.Context, oid uint32) (TypeInfo, error) {
	var rerr error
	if r.d.opts.Resolver != nil {
		info, err := r.d.opts.Resolver.ResolveType(ctx, oid)
		if err == nil {
			return info, nil
		}
		rerr = err
	}
	if info, ok := builtinTypeInfo(oid); ok {
		return info, nil
	}
	tm, ok := r.d.typeMsgs[oid]
	if !ok {
		if rerr != nil {
			return TypeInfo{}, rerr
		}
		return TypeInfo{}, fmt.Errorf("type oid %d is unknown (no resolver and no Type message)", oid)
	}
	if rerr != nil {
		r.d.log.Warn("type resolution failed; using the server's Type message", zap.Uint32("oid", oid), zap.Error(rerr))
	}
	info := TypeInfo{OID: oid, Namespace: tm.Namespace, Name: tm.Name, Kind: 'b', BaseTypMod: -1}
	if tm.Namespace == "pg_catalog" {
		if b, ok := builtinTypeByName(tm.Name); ok {
			info.Kind, info.Base = 'd', &b
		}
	}
	return info, nil
}

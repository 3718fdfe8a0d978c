package mysql

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// shape is a table as one TABLE_MAP event describes it. With
// binlog_row_metadata=FULL the event carries the column names, signedness,
// charsets, enum/set labels, nullability and primary key, so every row
// event is decoded with the schema of its own time: the binlog itself is
// the schema history, and a replay from an old checkpoint sees each old
// shape again (no catalog lookup ever applies today's schema to an old
// event).
type shape struct {
	fingerprint []byte
	table       *pipeline.Table
	descs       []colDesc
	captured    bool
	// seeded marks a shape read from the catalog at start rather than
	// from the binlog: it may be ahead of the stream (noteAdded).
	seeded bool
}

// shapes caches shapes by TABLE_MAP table id and hands out one *Table per
// distinct shape, with a generation that increases when a table's shape
// changes (the schema module registers a new schema version then).
type shapes struct {
	byID map[uint64]*shape
	// jsonCols are MariaDB JSON columns (LONGTEXT with a json_valid check,
	// which the binlog cannot tell from LONGTEXT) by table, as the catalog
	// described them at start.
	jsonCols  map[pipeline.TableID]map[string]bool
	latest    map[pipeline.TableID]*shape
	charsets  *charsets
	capture   func(db, table string) bool
	zeroNull  bool
	onChange  func(id pipeline.TableID, generation int)
	fpScratch []byte
	// added holds the columns ALTER statements added, with their DEFAULT,
	// until the table's next shape shows them (added.go); conv converts
	// those defaults.
	added map[pipeline.TableID]map[string]defaultLit
	conv  converter
	log   *zap.Logger
	// pending counts the ALTERs of each table since its last TABLE_MAP
	// (shapecheck.go).
	pending map[pipeline.TableID]int
}

func newShapes(cs *charsets, capture func(db, table string) bool, zeroNull bool) *shapes {
	return &shapes{byID: map[uint64]*shape{}, latest: map[pipeline.TableID]*shape{}, charsets: cs, capture: capture, zeroNull: zeroNull,
		conv: converter{zeroNull: zeroNull, charsets: cs}}
}

// of returns the shape of a TABLE_MAP event, reusing the cached one when
// the event describes the same table the same way.
func (s *shapes) of(tm *replication.TableMapEvent) (*shape, error) {
	fp := s.fingerprint(tm)
	if sh, ok := s.byID[tm.TableID]; ok && bytes.Equal(sh.fingerprint, fp) {
		return sh, nil
	}
	id := pipeline.TableID{Database: string(tm.Schema), Schema: string(tm.Schema), Table: string(tm.Table)}
	sh := &shape{fingerprint: append([]byte(nil), fp...), captured: s.capture(id.Schema, id.Table)}
	if sh.captured {
		descs, err := s.descs(tm)
		if err != nil {
			return nil, err
		}
		for i := range descs {
			if d := &descs[i]; s.jsonCols[id][d.name] && d.kind == gomysql.MYSQL_TYPE_BLOB && !d.binary {
				d.kind, d.charset = gomysql.MYSQL_TYPE_JSON, ""
			}
		}
		sh.descs = descs
		sh.table = s.tableFor(id, descs)
		s.latest[id] = sh
		delete(s.pending, id) // the binlog told the shape (Invariant 11)
		delete(s.added, id)   // and carried the added columns' DEFAULTs, or they are gone
	}
	s.byID[tm.TableID] = sh
	return sh, nil
}

// seed makes a catalog shape (from the snapshot) the latest one of its
// table, so the stream's first TABLE_MAP of an unchanged table reuses its
// *Table.
func (s *shapes) seed(id pipeline.TableID, descs []colDesc) *pipeline.Table {
	for i := range descs {
		if descs[i].kind == gomysql.MYSQL_TYPE_JSON {
			if s.jsonCols == nil {
				s.jsonCols = map[pipeline.TableID]map[string]bool{}
			}
			if s.jsonCols[id] == nil {
				s.jsonCols[id] = map[string]bool{}
			}
			s.jsonCols[id][descs[i].name] = true
		}
	}
	sh := &shape{table: s.tableFor(id, descs), descs: descs, captured: true, seeded: true}
	s.latest[id] = sh
	return sh.table
}

// tableFor returns the latest *Table of id when descs describe it the same
// way, else a new one of the next generation (and tells onChange).
func (s *shapes) tableFor(id pipeline.TableID, descs []colDesc) *pipeline.Table {
	prev := s.latest[id]
	if prev == nil {
		return buildTable(id, descs, 1, s.zeroNull)
	}
	if sameDescs(prev.descs, descs) {
		return prev.table
	}
	gen := prev.table.Generation + 1
	if s.onChange != nil {
		s.onChange(id, gen)
	}
	t := buildTable(id, descs, gen, s.zeroNull)
	carryMissing(prev.table, t)
	s.missingValues(id, prev.descs, descs, t)
	return t
}

// carryMissing gives the columns of t the missing values their namesakes
// of the same type had in prev: a missing value belongs to the column, not
// to the shape that added it. A sink may first see the column in a later
// shape (one batch holds every shape since its last write, and applies
// the newest), and must still fill the older rows with it.
func carryMissing(prev, t *pipeline.Table) {
	if prev == nil {
		return
	}
	for i := range t.Columns {
		c := &t.Columns[i]
		for j := range prev.Columns {
			p := &prev.Columns[j]
			if p.Missing != nil && strings.EqualFold(p.Name, c.Name) && p.Type == c.Type && p.Elem == c.Elem {
				c.Missing = p.Missing
				break
			}
		}
	}
}

// fingerprint serialises everything of a TABLE_MAP that shapes a decode.
func (s *shapes) fingerprint(tm *replication.TableMapEvent) []byte {
	b := s.fpScratch[:0]
	str := func(x []byte) {
		b = binary.AppendUvarint(b, uint64(len(x)))
		b = append(b, x...)
	}
	uints := func(x []uint64) {
		b = binary.AppendUvarint(b, uint64(len(x)))
		for _, v := range x {
			b = binary.AppendUvarint(b, v)
		}
	}
	str(tm.Schema)
	str(tm.Table)
	str(tm.ColumnType)
	for _, m := range tm.ColumnMeta {
		b = binary.AppendUvarint(b, uint64(m))
	}
	str(tm.NullBitmap)
	str(tm.SignednessBitmap)
	uints(tm.DefaultCharset)
	uints(tm.ColumnCharset)
	uints(tm.EnumSetDefaultCharset)
	uints(tm.EnumSetColumnCharset)
	uints(tm.PrimaryKey)
	for _, n := range tm.ColumnName {
		str(n)
	}
	for _, vals := range [][][][]byte{tm.EnumStrValue, tm.SetStrValue} {
		b = binary.AppendUvarint(b, uint64(len(vals)))
		for _, v := range vals {
			b = binary.AppendUvarint(b, uint64(len(v)))
			for _, x := range v {
				str(x)
			}
		}
	}
	s.fpScratch = b
	return b
}

// descs reads the column descriptions out of a TABLE_MAP event.
func (s *shapes) descs(tm *replication.TableMapEvent) ([]colDesc, error) {
	where := fmt.Sprintf("table map of %s.%s", tm.Schema, tm.Table)
	n := int(tm.ColumnCount)
	names := tm.ColumnNameString()
	if len(names) != n {
		return nil, fmt.Errorf("%s has no column names: it was logged without binlog_row_metadata=FULL; "+
			"set binlog_row_metadata=FULL and take a new snapshot (delete the checkpoint) to start after this point", where)
	}
	unsigned := tm.UnsignedMap()
	collations := tm.CollationMap()
	enumCollations := tm.EnumSetCollationMap()
	enums := tm.EnumStrValueMap()
	sets := tm.SetStrValueMap()
	out := make([]colDesc, n)
	for i := 0; i < n; i++ {
		d := &out[i]
		d.name = names[i]
		_, d.nullable = tm.Nullable(i)
		typ, meta := tm.ColumnType[i], tm.ColumnMeta[i]
		if typ == gomysql.MYSQL_TYPE_STRING && meta >= 256 {
			// CHAR/BINARY/ENUM/SET share a storage type; the real type
			// and the byte length are folded into the metadata.
			b0, b1 := byte(meta>>8), byte(meta)
			if b0&0x30 != 0x30 {
				d.length = int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
				typ = b0 | 0x30
			} else {
				d.length = int(b1)
				typ = b0
			}
		}
		d.kind = normKind(typ)
		d.unsigned = unsigned[i] && signable(d.kind)
		switch d.kind {
		case gomysql.MYSQL_TYPE_NEWDECIMAL:
			d.precision, d.scale = int(meta>>8), int(meta&0xff)
		case gomysql.MYSQL_TYPE_BIT:
			d.length = int(meta>>8)*8 + int(meta&0xff)
		case gomysql.MYSQL_TYPE_VARCHAR:
			d.length = int(meta)
		case gomysql.MYSQL_TYPE_ENUM, gomysql.MYSQL_TYPE_SET:
			d.length = 0 // the metadata held the storage size, not a length
		}
		switch tm.ColumnType[i] {
		case gomysql.MYSQL_TYPE_TIMESTAMP2, gomysql.MYSQL_TYPE_DATETIME2, gomysql.MYSQL_TYPE_TIME2:
			d.scale = int(meta)
		}
		if coll, ok := collations[i]; ok {
			d.charset = s.charsets.name(coll)
			d.binary = coll == binaryCollation
		} else if d.kind == gomysql.MYSQL_TYPE_BLOB || d.kind == gomysql.MYSQL_TYPE_VARCHAR || d.kind == gomysql.MYSQL_TYPE_STRING {
			d.binary = true
		}
		if coll, ok := enumCollations[i]; ok {
			d.charset = s.charsets.name(coll)
		}
		if d.kind == gomysql.MYSQL_TYPE_GEOMETRY || d.kind == gomysql.MYSQL_TYPE_JSON {
			d.charset, d.binary = "", false // MariaDB logs a collation for geometry
		}
		if d.kind == gomysql.MYSQL_TYPE_VARCHAR || d.kind == gomysql.MYSQL_TYPE_STRING {
			// The binlog gives byte lengths; the catalog characters.
			d.length /= s.charsets.maxLen(d.charset)
		}
		labels := enums[i]
		if d.kind == gomysql.MYSQL_TYPE_SET {
			labels = sets[i]
		}
		for _, l := range labels {
			u, err := s.charsets.decode(d.charset, []byte(l))
			if err != nil {
				return nil, fmt.Errorf("%s: label of column %s: %w", where, d.name, err)
			}
			d.labels = append(d.labels, u)
		}
	}
	for k, idx := range tm.PrimaryKey {
		if int(idx) < n {
			out[idx].keyPos = k + 1
		}
	}
	return out, nil
}

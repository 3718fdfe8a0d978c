package pipeline

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"
)

// Type is a column's logical type in the record model. Sources map their
// database types onto it; sinks and the schema module map it onward.
type Type uint8

const (
	TypeText Type = iota // unknown source type kept in its text form
	TypeBool
	TypeInt16
	TypeInt32
	TypeInt64
	TypeUint8
	TypeUint16
	TypeUint32
	TypeUint64
	TypeFloat32
	TypeFloat64
	TypeDecimal
	TypeString
	TypeBytes
	TypeUUID
	TypeJSON
	TypeDate
	TypeTime
	TypeTimeTZ
	TypeTimestamp
	TypeTimestampTZ
	TypeInterval
	TypeInet
	TypeMacaddr
	TypeEnum
	TypeSet
	TypeBit
	TypeGeometry
	TypeArray
)

var typeNames = [...]string{"text", "bool", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
	"float32", "float64", "decimal", "string", "bytes", "uuid", "json", "date", "time", "timetz",
	"timestamp", "timestamptz", "interval", "inet", "macaddr", "enum", "set", "bit", "geometry", "array"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Column describes one column of a table shape.
type Column struct {
	Name       string
	Type       Type
	Elem       Type     // element type when Type is TypeArray
	Nullable   bool     // false when the source declares NOT NULL
	Key        bool     // part of the primary key / replica identity
	Precision  int      // decimals: total digits, 0 when unconstrained; strings: max length, 0 when none
	Scale      int      // decimals: digits after the point; -1 when unconstrained
	Enum       []string // labels of an enum/set type, in declaration order
	SourceType string   // the database's own type name, e.g. "numeric(10,2)", "character varying(40)"
	Comment    string
	// Missing is the value that rows which existed when the column was
	// added hold without ever having been written (Postgres attmissingval,
	// from ALTER TABLE … ADD COLUMN … DEFAULT constant): no change event
	// carries it, so a sink that adds the column fills its existing rows
	// with it. nil when there is none.
	Missing any
	// Fields, when not nil, makes a TypeJSON column an object, or an array
	// of objects, whose members are these columns: a transform fills it (a
	// join's looked-up row, a nest's child rows), and a sink can map the
	// members (a search index's object properties).
	// Empty but not nil while the members are not known yet. nil for
	// free-form JSON.
	Fields []Column
}

// TableID names a captured table.
type TableID struct {
	Database string
	Schema   string
	Table    string
}

func (t TableID) String() string { return t.Schema + "." + t.Table }

// Name is template with the placeholders {database}, {schema} and
// {table} replaced by t's names: how sinks name a table's target (table,
// index, key prefix) from a template the user configures.
func (t TableID) Name(template string) string {
	return strings.NewReplacer("{database}", t.Database, "{schema}", t.Schema, "{table}", t.Table).Replace(template)
}

// CheckNameTemplate returns an error naming the first placeholder of
// template that TableID.Name does not replace, or an unclosed brace.
func CheckNameTemplate(template string) error {
	rest := template
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return nil
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return errors.New("unclosed '{'")
		}
		switch p := rest[i : i+j+1]; p {
		case "{database}", "{schema}", "{table}":
		default:
			return fmt.Errorf("unknown placeholder %s (want {database}, {schema} or {table})", p)
		}
		rest = rest[i+j+1:]
	}
}

// Table is one shape of a table: columns as the source described them at the
// time of the records that point to it. A schema change produces a new *Table;
// records keep the shape they were decoded with. Tables are immutable once
// published on a record.
type Table struct {
	ID      TableID
	Columns []Column
	KeyIdx  []int // indexes into Columns of the key columns, in key order
	// Generation increases each time the source sees a new shape of the table.
	Generation int
	// FullBefore: an update's or delete's Before carries every column
	// (Postgres REPLICA IDENTITY FULL, MySQL/MariaDB binlog_row_image
	// FULL); otherwise it may carry only the key, the rest NULL.
	FullBefore bool
}

// Op is what a record does.
type Op uint8

const (
	OpInsert    Op = iota + 1 // "c"
	OpUpdate                  // "u"
	OpDelete                  // "d"
	OpRead                    // "r": a row read by a snapshot
	OpTruncate                // "t": every row of the table with a lower version is gone
	OpHeartbeat               // control: no table; carries a position and a source time
	// OpShape is control too: Table is a table's new shape, seen by the
	// source with no row change after it (a column added to an idle
	// table). It carries no row; a sink applies the shape as it would for
	// a row of it (adds the columns, fills the rows that predate them with
	// their Missing values) and writes nothing else.
	OpShape
	// OpWatermark is control inside a source's stream: After[0] is the
	// token (a string) of an incremental snapshot's low or high
	// watermark, read back from the log at the position where it
	// committed (snapshot/). The snapshot engine consumes it; it never
	// reaches an operator or a sink.
	OpWatermark
	// OpRewrite is control inside a source's stream: the rows of Table
	// (only its ID is set) were rewritten in place by the record's
	// transaction with no change event for them (PostgreSQL's ALTER
	// TABLE … TYPE … USING, ADD COLUMN … DEFAULT with a volatile
	// default). The snapshot engine consumes it and reads the table
	// again; it never reaches an operator or a sink.
	OpRewrite
)

func (o Op) String() string {
	switch o {
	case OpInsert:
		return "c"
	case OpUpdate:
		return "u"
	case OpDelete:
		return "d"
	case OpRead:
		return "r"
	case OpTruncate:
		return "t"
	case OpHeartbeat:
		return "heartbeat"
	case OpShape:
		return "shape"
	case OpWatermark:
		return "watermark"
	case OpRewrite:
		return "rewrite"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// IsData reports whether the op changes rows of a table.
func (o Op) IsData() bool { return o >= OpInsert && o <= OpTruncate }

// Shaped reports whether a record of the op carries a table shape the
// sink must hold: a data record's or an OpShape's.
func (o Op) Shaped() bool { return o.IsData() || o == OpShape }

// Version totally orders the changes of one row. Components compare
// numerically, most significant first. Sources fill it as follows (why
// these orders hold, and the tests that prove it: docs/versions.md):
//
//	Postgres stream:   {0, commit LSN, 0, 2 + index of the change in its transaction}
//	Postgres snapshot: rows {0, consistent point LSN, 0, 1}, preceded per table by
//	                   a truncate barrier at {0, consistent point LSN, 0, 0} so a
//	                   fresh load clears whatever an interrupted earlier load left;
//	                   both sort below every streamed change, including those of a
//	                   transaction whose commit record starts exactly at the
//	                   consistent point (same LSN, higher index)
//	MySQL/MariaDB:     {epoch, binlog file number, transaction start position, row index}
//	generate:          {0, 0, 0, sequence number}
type Version [4]uint64

// Compare returns -1, 0 or +1.
func (v Version) Compare(o Version) int {
	for i := range v {
		if v[i] < o[i] {
			return -1
		}
		if v[i] > o[i] {
			return 1
		}
	}
	return 0
}

// Less reports v < o.
func (v Version) Less(o Version) bool { return v.Compare(o) < 0 }

// Next is the smallest version above v: what an operator gives an output
// that must sort above the last one of its row when its input's version
// would not (transform/join, transform/aggregate).
func (v Version) Next() Version {
	for i := len(v) - 1; i >= 0; i-- {
		if v[i] < math.MaxUint64 {
			v[i]++
			return v
		}
		v[i] = 0
	}
	return v
}

// SameColumns reports whether two shapes have the same columns: names,
// types, sizes, keys, nullability and source types, in the same order.
func SameColumns(a, b *Table) bool {
	if len(a.Columns) != len(b.Columns) {
		return false
	}
	for i := range a.Columns {
		x, y := a.Columns[i], b.Columns[i]
		if x.Name != y.Name || x.Type != y.Type || x.Elem != y.Elem || x.Precision != y.Precision || x.Scale != y.Scale ||
			x.Key != y.Key || x.Nullable != y.Nullable || x.SourceType != y.SourceType {
			return false
		}
	}
	return true
}

// Bytes is the 32-byte big-endian form; byte-wise order equals version order,
// so sinks can store and compare it as an opaque blob or string.
func (v Version) Bytes() []byte {
	b := make([]byte, 32)
	for i, c := range v {
		binary.BigEndian.PutUint64(b[i*8:], c)
	}
	return b
}

// String is the 64-hex-digit form of Bytes; string order equals version order.
func (v Version) String() string { return string(v.AppendHex(make([]byte, 0, 64))) }

// AppendHex appends the String form to dst without allocating more.
func (v Version) AppendHex(dst []byte) []byte {
	var b [32]byte
	for i, c := range v {
		binary.BigEndian.PutUint64(b[i*8:], c)
	}
	return hex.AppendEncode(dst, b[:])
}

// ParseVersion reads the String or Bytes form.
func ParseVersion(s string) (Version, error) {
	b := []byte(s)
	if len(s) == 64 {
		var err error
		if b, err = hex.DecodeString(s); err != nil {
			return Version{}, fmt.Errorf("version %q: %w", s, err)
		}
	}
	if len(b) != 32 {
		return Version{}, fmt.Errorf("version %q: want 64 hex digits or 32 bytes", s)
	}
	var v Version
	for i := range v {
		v[i] = binary.BigEndian.Uint64(b[i*8:])
	}
	return v, nil
}

// IsStream reports whether r is in the stream's order: neither a snapshot
// record (Snapshot) nor a read. A later parallel MySQL/MariaDB reader's
// rows sort above stream changes written after them, so only stream
// records may order what comes after (the exactly-once Kafka sink's mark).
func (r *Record) IsStream() bool { return !r.Snapshot && r.Op != OpRead }

// Origins tracks what an operator's outputs stem from: the newest
// OrderVersion of the records it noted (All, the outputs' Origin) and of
// those among them that are stream records (Stream). Outputs whose Origin
// comes from snapshot records alone, above every stream record noted (a
// later parallel MariaDB reader's rows sort above stream changes written
// after them), are snapshot records (Ahead): the exactly-once Kafka sink
// neither counts them in its mark nor skips them.
type Origins struct{ All, Stream Version }

// Note counts r.
func (o *Origins) Note(r *Record) {
	v := r.OrderVersion()
	if o.All.Less(v) {
		o.All = v
	}
	if r.IsStream() && o.Stream.Less(v) {
		o.Stream = v
	}
}

// Ahead reports whether All comes from snapshot records alone.
func (o Origins) Ahead() bool { return o.Stream.Less(o.All) }

// Derived reports whether an operator derived r from an input (Origin set).
func (r *Record) Derived() bool { return r.Origin != Version{} }

// OrderVersion is Origin for a derived record, else Version: the version
// of the source change r stems from, in the order records leave the
// operators.
func (r *Record) OrderVersion() Version {
	if r.Derived() {
		return r.Origin
	}
	return r.Version
}

// Position is a source's resume token, opaque to everything but the source
// that made it (JSON by convention, so checkpoints stay readable). It covers
// both the snapshot and the stream phase.
type Position []byte

// Record is one change. Before and After are aligned with Table.Columns
// (nil slices when absent: no Before on insert/read, no After on delete).
type Record struct {
	Op      Op
	Table   *Table // nil for heartbeats
	Before  []any
	After   []any
	Version Version
	// EventTime is the source commit time (or the snapshot time for reads).
	EventTime time.Time
	TxID      uint64
	// Snapshot marks the records of an initial load: its rows (OpRead) and
	// the truncate barrier that clears what an interrupted earlier load
	// left. Sinks that cannot express a barrier (a compacted Kafka topic,
	// where every record needs a key) may skip a snapshot barrier; a
	// truncate from the source itself is never skipped.
	Snapshot bool
	// Replaces marks a snapshot read of a row the sinks may already hold:
	// a re-snapshot or a repair's, not a table's first load (whose
	// barrier, or sinks that never held the table, leave nothing older).
	// An operator that keeps such a row from the sinks deletes its key
	// instead (transform/filter), so a re-snapshot after a change of its
	// rule leaves no row the rule now excludes.
	// On an OpTruncate, Replaces marks a re-read's sweep (Invariant 14):
	// it follows rows versioned above it, and removes only the rows below
	// its version, those the re-read did not find. A consumer that cannot
	// compare versions (a Kafka topic's) would clear the re-read rows too,
	// so the Kafka sink does not write it; an operator keeps what sorts
	// above it (transform/aggregate, transform/join, transform/window).
	Replaces bool
	// Refetch marks a change carrying Unchanged values the sinks may hold
	// nothing to keep for: an insert whose MySQL/MariaDB row image left
	// columns out (a session writing binlog_row_image=MINIMAL or NOBLOB).
	// The snapshot engine reads the row's key again after it (Invariant
	// 13); until that read lands, a sink holds NULL for those columns.
	Refetch bool
	// Origin is, for a record an operator derived from an input (a join's
	// output row), the version of that input; zero for records a source
	// read (no source version is zero). A derived record's own Version
	// orders its row but may sort above inputs that come after it (a join
	// raises a replayed output above the row's last emitted version);
	// Origin follows the order records leave the operator in, which the
	// exactly-once Kafka sink's high-water mark needs (docs/versions.md).
	Origin Version
	// Dest, when set, names the sinks that take the record (transform/
	// route); nil: every sink whose Route takes the table.
	Dest *Dest
	// Pos is the position of the transaction this record belongs to, for
	// diagnostics and the DLQ; the ledger uses Batch.Pos.
	Pos Position
	// Size estimates the record's memory in bytes, for the in-flight cap.
	Size int
}

// Key returns the record's key values (from After, else Before).
func (r *Record) Key() []any {
	img := r.After
	if img == nil {
		img = r.Before
	}
	if r.Table == nil || img == nil {
		return nil
	}
	k := make([]any, len(r.Table.KeyIdx))
	for i, idx := range r.Table.KeyIdx {
		k[i] = img[idx]
	}
	return k
}

// Batch is what a source hands over in one Read. Pos, when not nil, is a
// checkpointable position (a transaction boundary, Invariant 2) reached once
// every record in this and all earlier batches is durable. Batches in the
// middle of a large transaction carry a nil Pos.
type Batch struct {
	Records []Record
	Pos     Position
	// Dead holds changes the source could not decode (Invariant 7): the
	// runtime stores them in the DLQ before the batch moves on, so a
	// checkpoint past them never loses them silently.
	Dead []DeadLetter
	// Bytes estimates the batch's memory; 0 means "sum the records' Size".
	Bytes int
}

// Weight returns the batch's byte estimate used by the in-flight cap.
func (b *Batch) Weight() int {
	if b.Bytes > 0 {
		return b.Bytes
	}
	n := 0
	for i := range b.Records {
		n += b.Records[i].Size
		if b.Records[i].Size == 0 {
			n += EstimateSize(&b.Records[i])
		}
	}
	return n
}

// EstimateSize estimates the heap bytes a record holds: the Record
// itself, its position, its images' backing arrays and each value's own
// allocation (an interface holding anything but a pointer allocates its
// value), rounded up as Go's allocator rounds small objects. It is what
// the in-flight cap counts (Invariant 6), so that max_in_flight_bytes is
// close to the memory the records in flight take; it errs high, never
// much low (shared values such as the Table are not counted).
func EstimateSize(r *Record) int {
	return int(unsafe.Sizeof(Record{})) + allocSize(len(r.Pos)) + ImageSize(r.Before) + ImageSize(r.After)
}

// ImageSize estimates the heap bytes an image (a row's values) holds:
// its backing array and each value's own allocation, as EstimateSize
// counts them.
func ImageSize(img []any) int {
	n := 0
	if img != nil {
		n = allocSize(16 * cap(img))
	}
	for _, v := range img {
		n += valueSize(v)
	}
	return n
}

// valueSize is the heap a record-model value in an interface takes.
func valueSize(v any) int {
	switch x := v.(type) {
	case nil, bool, Unchanged:
		return 0
	case int64, uint64, float64, TimeOfDay:
		return 8
	case string:
		return 16 + allocSize(len(x))
	case JSON:
		return 16 + allocSize(len(x))
	case []byte:
		return 24 + allocSize(cap(x))
	case Decimal:
		n := 32
		if x.Unscaled != nil {
			n += 32 + allocSize(8*len(x.Unscaled.Bits()))
		}
		return n
	case []any:
		n := 24 + allocSize(16*cap(x))
		for _, e := range x {
			n += valueSize(e)
		}
		return n
	case UUID, Date, TimeTZ, Timestamp, Interval:
		return 16
	default:
		return 32
	}
}

// allocSize rounds n up as the allocator does for small objects (to 8
// bytes up to 16, then to 16); larger ones are near enough to n.
func allocSize(n int) int {
	switch {
	case n == 0:
		return 0
	case n <= 16:
		return (n + 7) &^ 7
	default:
		return (n + 15) &^ 15
	}
}

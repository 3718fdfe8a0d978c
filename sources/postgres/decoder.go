package postgres

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// DecoderOptions configures a Decoder.
type DecoderOptions struct {
	// Database is the captured database; it becomes TableID.Database.
	Database string
	// Resolver resolves the types of new relations and added columns. When
	// nil only built-in types (and domains over them, named by the server's
	// Type messages) are decoded; other types pass as text.
	Resolver TypeResolver
	// Catalog, when set, is asked for the table's catalog shape each time a
	// Relation message changes a table's shape; matching columns take their
	// metadata (nullability, comments, primary key) from it. An error is
	// logged and the shape is built from the message alone.
	Catalog func(ctx context.Context, relOID uint32, schema, name string) (*TableShape, error)
	// SpillDir holds spill files of streamed transactions (default: the
	// system temp directory). SpillThreshold is the total size of streamed
	// changes kept in memory before a transaction's changes go to its spill
	// file (default 64 MiB).
	SpillDir       string
	SpillThreshold int64
	// ChunkRecords caps the records of one Chunk (default 5000).
	ChunkRecords int
	// Refetch reads the current values of cols of the rows whose keys
	// are keys (each the key columns' text, in key order; see
	// refetchUnchanged and doubt.go); rows[i] is nil when key i has no
	// row any more. It blocks until the reads are done or ctx ends. Nil:
	// unchanged values stay unchanged and keys in doubt are not re-read.
	// xid is the changes' transaction, committed (its commit record was
	// decoded) but possibly not yet visible to other sessions.
	Refetch func(ctx context.Context, xid uint32, s *TableShape, keys [][]string, cols []int) (rows [][]any, err error)
	// Generation leads every version (Invariant 10, docs/versions.md).
	Generation uint64
	// HeartbeatPrefix is the logical message prefix of heartbeats
	// (default "sluice.heartbeat").
	HeartbeatPrefix string
	// Tables are the captured tables: changes of others the publication
	// sends are left out, and the heartbeats watch the publication for
	// these (published.go). Republish puts the publication back as at
	// start (every captured table, every operation) and commits with it a
	// rewrite message for each table it put back and each table of read
	// that exists, so the stream reads them again; nil: not watched.
	Tables    []pipeline.TableID
	Republish func(ctx context.Context, read []pipeline.TableID) (Republished, error)
	// StartShapes are the captured tables' shapes as the source read them
	// at start: a dropped table's truncate takes its shape from there when
	// the stream decoded none of it (ddlevents.go).
	StartShapes map[pipeline.TableID]*pipeline.Table
	Watch       WatchHooks // what the publication watch finds (published.go)
	Log         *zap.Logger
}

// Chunk is a run of records of one transaction, in order. A transaction
// arrives as zero or more non-final chunks followed by one Final chunk.
type Chunk struct {
	Records []pipeline.Record
	// Final marks the last chunk of a transaction, or a heartbeat. Only a
	// Final chunk's EndLSN may become a checkpoint (Invariant 2).
	Final bool
	// CommitLSN is the transaction's commit record LSN, the version
	// component of its records (for a heartbeat: the message LSN).
	CommitLSN pglogrepl.LSN
	// EndLSN is set on Final chunks only: the position to checkpoint and,
	// once the chunk is durable, acknowledge (Invariant 1) — the commit's
	// TransactionEndLSN, or a heartbeat message's LSN.
	EndLSN     pglogrepl.LSN
	CommitTime time.Time
	Xid        uint32
	// Dead holds changes of this chunk whose values could not be decoded,
	// with their raw pgoutput message (Invariant 7).
	Dead []pipeline.DeadLetter
}

// DecoderStats reports the decoder's buffering of streamed transactions.
type DecoderStats struct {
	OpenStreams   int   // streamed transactions not yet committed or aborted
	BufferedBytes int64 // their changes held in memory
	SpillFiles    int   // spill files currently on disk
	SpillBytes    int64 // bytes currently in spill files
	SpilledTotal  int64 // bytes ever written to spill files
}

// Decoder turns pgoutput protocol v2 messages into records. Decode is
// called from one goroutine in the order the server sends messages;
// Tables and Stats may be called concurrently.
//
// Versions follow pipeline.Version: {0, commit LSN, 0, 1 + index of the
// change in its transaction}, assigned at commit for streamed transactions.
// Record.Pos is left nil for the source to fill.
type Decoder struct {
	opts     DecoderOptions
	log      *zap.Logger
	resolver TypeResolver

	rels map[uint32]*TableShape // relation cache by relation OID
	// shapeMiss is, by relation OID, the last heartbeat digest the
	// catalog did not hold (shapecheck.go).
	shapeMiss map[uint32]*shapeMiss
	typeMsgs  map[uint32]pglogrepl.TypeMessage

	txn       *txnState // open non-streamed transaction
	inStream  bool
	streamXid uint32
	streams   map[uint32]*streamBuf
	memBytes  int64

	lastTxnRecords int // records of the last transaction ended, capped at ChunkRecords

	// republishedAt: the WAL position after the last Republish; gone:
	// the captured tables it found no longer exist (published.go).
	republishedAt uint64
	gone          []pipeline.TableID
	// captured is Tables as a set, lastCaptured the last shape found in
	// it; leftOut the other tables the publication sent changes of
	// (published.go).
	captured, leftOut map[pipeline.TableID]bool
	lastCaptured      *pipeline.Table

	mu     sync.Mutex
	latest map[pipeline.TableID]*TableShape // newest shape per table
	stats  DecoderStats
}

type txnState struct {
	xid        uint32
	commitLSN  pglogrepl.LSN
	commitTime time.Time
	index      uint64
	records    []pipeline.Record
	dead       []pipeline.DeadLetter
	doubt      *doubt // keys of deferrable primary keys (doubt.go)
}

// streamBuf holds the changes of one streamed transaction until it ends.
type streamBuf struct {
	xid     uint32
	mem     []bufferedMsg
	memSize int64
	file    *spillFile
	aborted map[uint32]bool // aborted subtransactions with changes in file
}

type bufferedMsg struct {
	subxid uint32
	data   []byte
}

// bufferedOverhead approximates the memory of a buffered message besides
// its bytes.
const bufferedOverhead = 48

// NewDecoder returns a decoder with empty caches.
func NewDecoder(opts DecoderOptions) (*Decoder, error) {
	if opts.ChunkRecords <= 0 {
		opts.ChunkRecords = 5000
	}
	if opts.SpillThreshold <= 0 {
		opts.SpillThreshold = 64 << 20
	}
	if opts.HeartbeatPrefix == "" {
		opts.HeartbeatPrefix = "sluice.heartbeat"
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.SpillDir != "" {
		if err := os.MkdirAll(opts.SpillDir, 0o700); err != nil {
			return nil, fmt.Errorf("spill dir: %w", err)
		}
		// Spill files of a run that crashed belong to transactions the
		// server resends from the restart point.
		stale, _ := filepath.Glob(filepath.Join(opts.SpillDir, "sluice-xid*.spill"))
		for _, f := range stale {
			_ = os.Remove(f)
		}
	}
	d := &Decoder{opts: opts, log: opts.Log, latest: map[pipeline.TableID]*TableShape{}}
	d.resolver = &decoderResolver{d: d}
	d.Reset()
	return d, nil
}

// Reset prepares for a new replication connection: the relation cache is
// emptied (the server resends Relation messages), an open transaction and
// every in-progress streamed transaction are discarded (the server resends
// them from the restart point) and their spill files removed. Shapes seen
// before are remembered, so an identical Relation keeps its *pipeline.Table.
func (d *Decoder) Reset() {
	for _, sb := range d.streams {
		d.dropStream(sb)
	}
	d.rels = map[uint32]*TableShape{}
	d.typeMsgs = map[uint32]pglogrepl.TypeMessage{}
	d.streams = map[uint32]*streamBuf{}
	d.txn, d.inStream, d.streamXid, d.memBytes = nil, false, 0, 0
	d.mu.Lock()
	d.stats.OpenStreams, d.stats.BufferedBytes = 0, 0
	d.mu.Unlock()
}

// Close removes spill files; the decoder must not be used afterwards.
func (d *Decoder) Close() error {
	d.Reset()
	return nil
}

// Tables returns the newest shape of every table seen.
func (d *Decoder) Tables() map[pipeline.TableID]*pipeline.Table {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[pipeline.TableID]*pipeline.Table, len(d.latest))
	for id, s := range d.latest {
		out[id] = s.Table
	}
	return out
}

// Stats reports streamed-transaction buffering (for metrics, Invariant 9).
func (d *Decoder) Stats() DecoderStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// DecodeError reports a message or value the decoder could not turn into a
// record; Text holds the undecodable value when there is one (for the
// dead-letter queue, Invariant 7).
type DecodeError struct {
	WALStart pglogrepl.LSN
	Table    pipeline.TableID
	Column   string
	Text     []byte
	Err      error
}

func (e *DecodeError) Error() string {
	if e.Column != "" {
		return fmt.Sprintf("decode %s.%s at %s: %v", e.Table, e.Column, e.WALStart, e.Err)
	}
	return fmt.Sprintf("decode message at %s: %v", e.WALStart, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Decode consumes one pgoutput message (XLogData.WALData) and calls emit
// for every chunk it completes. emit's error is returned as is. After any
// error the decoder's transaction state is undefined: reconnect from the
// last checkpoint and call Reset.
func (d *Decoder) Decode(ctx context.Context, walData []byte, walStart pglogrepl.LSN, emit func(Chunk) error) error {
	if len(walData) == 0 {
		return &DecodeError{WALStart: walStart, Err: errors.New("empty message")}
	}
	if d.inStream {
		switch pglogrepl.MessageType(walData[0]) {
		case pglogrepl.MessageTypeRelation, pglogrepl.MessageTypeInsert, pglogrepl.MessageTypeUpdate,
			pglogrepl.MessageTypeDelete, pglogrepl.MessageTypeTruncate:
			return d.bufferStreamed(walData, walStart)
		case pglogrepl.MessageTypeMessage:
			// A transactional logical message (after the xid, its flags'
			// bit 1) belongs to the streamed transaction, like a change.
			if len(walData) > 5 && walData[5]&1 != 0 {
				return d.bufferStreamed(walData, walStart)
			}
		}
	}
	msg, err := parseMessage(walData, d.inStream)
	if err != nil {
		return &DecodeError{WALStart: walStart, Err: err}
	}
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		if d.txn != nil {
			return &DecodeError{WALStart: walStart, Err: fmt.Errorf("begin of xid %d inside open xid %d", m.Xid, d.txn.xid)}
		}
		d.txn = &txnState{xid: m.Xid, commitLSN: m.FinalLSN, commitTime: m.CommitTime}
	case *pglogrepl.CommitMessage:
		tx := d.txn
		if tx == nil {
			return &DecodeError{WALStart: walStart, Err: errors.New("commit without begin")}
		}
		if m.CommitLSN != tx.commitLSN {
			return &DecodeError{WALStart: walStart, Err: fmt.Errorf("commit LSN %s differs from begin's final LSN %s", m.CommitLSN, tx.commitLSN)}
		}
		d.txn = nil
		if err := d.settle(ctx, tx, emit); err != nil {
			return err
		}
		return d.flush(tx, true, m.TransactionEndLSN, emit)
	case *pglogrepl.RelationMessageV2:
		return d.applyRelation(ctx, &m.RelationMessage, walStart)
	case *pglogrepl.TypeMessageV2:
		d.typeMsgs[m.DataType] = m.TypeMessage
		if f, ok := d.opts.Resolver.(interface{ Forget(uint32) }); ok {
			f.Forget(m.DataType)
		}
	case *pglogrepl.InsertMessageV2, *pglogrepl.UpdateMessageV2, *pglogrepl.DeleteMessageV2, *pglogrepl.TruncateMessageV2:
		if d.txn == nil {
			return &DecodeError{WALStart: walStart, Err: fmt.Errorf("%T outside a transaction", m)}
		}
		return d.change(ctx, d.txn, msg, walData, walStart, emit)
	case *pglogrepl.LogicalDecodingMessageV2:
		return d.logicalMessage(ctx, m, emit)
	case *pglogrepl.StreamStartMessageV2:
		d.inStream, d.streamXid = true, m.Xid
		if sb := d.streams[m.Xid]; sb != nil && m.FirstSegment == 1 {
			d.dropStream(sb) // a restart of the transaction's stream
		}
		if d.streams[m.Xid] == nil {
			d.streams[m.Xid] = &streamBuf{xid: m.Xid}
			d.updateStreamStats()
		}
	case *pglogrepl.StreamStopMessageV2:
		d.inStream = false
	case *pglogrepl.StreamCommitMessageV2:
		return d.streamCommit(ctx, m, walStart, emit)
	case *pglogrepl.StreamAbortMessageV2:
		d.streamAbort(m)
	case *pglogrepl.OriginMessage:
		// Changes replayed from another origin are captured like any other.
	default:
		d.log.Debug("ignoring pgoutput message", zap.String("type", msg.Type().String()))
	}
	return nil
}

// parseMessage is pglogrepl.ParseV2, with a malformed message reported as
// an error rather than a panic.
func parseMessage(data []byte, inStream bool) (msg pglogrepl.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("malformed %q message: %v", data[0], r)
		}
	}()
	if pglogrepl.MessageType(data[0]) == pglogrepl.MessageTypeInsert {
		return parseInsert(data, inStream)
	}
	return pglogrepl.ParseV2(data, inStream)
}

func (d *Decoder) logicalMessage(ctx context.Context, m *pglogrepl.LogicalDecodingMessageV2, emit func(Chunk) error) error {
	if m.Transactional && d.txn != nil {
		return d.txMessage(d.txn, &m.LogicalDecodingMessage, emit)
	}
	if m.Transactional || m.Prefix != d.opts.HeartbeatPrefix {
		d.log.Debug("ignoring logical message", zap.String("prefix", m.Prefix), zap.Bool("transactional", m.Transactional))
		return nil
	}
	if d.txn != nil {
		// Not produced by pgoutput (non-transactional messages are sent
		// when decoded, transactions at commit); a Final chunk here would
		// break Invariant 2, so the heartbeat is skipped.
		d.log.Warn("heartbeat inside a transaction ignored", zap.Stringer("lsn", m.LSN))
		return nil
	}
	when, checks := parseHeartbeat(m.Content)
	at, err := time.Parse(time.RFC3339Nano, when)
	if err != nil {
		ts, perr := parseTimestampText(when, true)
		if perr != nil || ts.Special != pipeline.Finite {
			d.log.Debug("heartbeat content is not a time", zap.ByteString("content", m.Content))
		} else {
			at, err = ts.Time(), nil
		}
	}
	// Invariant 8: a heartbeat carries a position through the pipeline.
	rec := pipeline.Record{Op: pipeline.OpHeartbeat, EventTime: at.UTC(), Version: pipeline.Version{d.opts.Generation, uint64(m.LSN), 0, 0}}
	rec.Size = pipeline.EstimateSize(&rec)
	// Invariant 11: shapes changed with no row change since go out with it.
	recs := d.checkShapes(ctx, checks, m.LSN, rec)
	if err := d.checkPublished(ctx, m.Content, rec); err != nil {
		return err
	}
	recs = append(recs, rec)
	return emit(Chunk{Records: recs, Final: true, CommitLSN: m.LSN, EndLSN: m.LSN, CommitTime: rec.EventTime})
}

// txMessage turns a transactional logical message of tx into a record,
// versioned in the transaction like a change: an incremental snapshot's
// watermark (snapshot/), a table rewrite or a dropped table (ddlevents.go). Other prefixes
// are not sluice's and are ignored.
func (d *Decoder) txMessage(tx *txnState, m *pglogrepl.LogicalDecodingMessage, emit func(Chunk) error) error {
	switch m.Prefix {
	case WatermarkPrefix:
		return d.add(tx, pipeline.Record{Op: pipeline.OpWatermark, After: []any{string(m.Content)}}, emit)
	case RewritePrefix:
		if r := d.rewriteRecord(m); r != nil {
			return d.add(tx, *r, emit)
		}
		return nil
	case DropPrefix:
		if r := d.dropRecord(m); r != nil {
			return d.add(tx, *r, emit)
		}
		return nil
	}
	d.log.Debug("ignoring logical message", zap.String("prefix", m.Prefix), zap.Bool("transactional", true))
	return nil
}

// flush hands over the transaction's pending records. Non-final chunks
// carry no EndLSN: the runtime checkpoints only on Final ones (Invariant 2).
func (d *Decoder) flush(tx *txnState, final bool, end pglogrepl.LSN, emit func(Chunk) error) error {
	c := Chunk{Records: tx.records, Final: final, CommitLSN: tx.commitLSN, CommitTime: tx.commitTime, Xid: tx.xid, Dead: tx.dead}
	tx.dead = nil
	// Invariant 2: only the chunk that ends a transaction carries a
	// position the runtime may checkpoint.
	if final {
		c.EndLSN = end
		d.lastTxnRecords = int(min(tx.index, uint64(d.opts.ChunkRecords)))
	}
	tx.records = nil
	return emit(c)
}

// applyRelation caches a Relation message's shape. A message identical to
// the table's newest shape keeps it; any difference makes a new shape with
// the next Generation, while records already decoded keep theirs.
func (d *Decoder) applyRelation(ctx context.Context, rel *pglogrepl.RelationMessage, walStart pglogrepl.LSN) error {
	id := pipeline.TableID{Database: d.opts.Database, Schema: rel.Namespace, Table: rel.RelationName}
	d.mu.Lock()
	prev := d.latest[id]
	d.mu.Unlock()
	if prev != nil && prev.signature == relationSignature(rel) {
		d.rels[rel.RelationID] = prev
		return nil
	}
	base := prev
	if d.opts.Catalog != nil {
		cs, err := d.opts.Catalog(ctx, rel.RelationID, rel.Namespace, rel.RelationName)
		if err != nil {
			d.log.Warn("catalog lookup failed; shape built from the Relation message alone",
				zap.Stringer("table", id), zap.Error(err))
		} else if cs != nil {
			base = mergeShapes(cs, prev)
		}
	}
	gen := 1
	if prev != nil {
		gen = prev.Table.Generation + 1
	}
	s, err := ShapeFromRelation(ctx, d.opts.Database, rel, base, d.resolver, gen)
	if err != nil {
		return &DecodeError{WALStart: walStart, Table: id, Err: err}
	}
	if err := identityCarriesKey(rel, s); err != nil {
		return pipeline.Fatal(&DecodeError{WALStart: walStart, Table: id, Err: err})
	}
	if s.ReplicaIdentity == 'f' && len(s.Table.KeyIdx) == 0 && base == nil {
		d.log.Warn("table has REPLICA IDENTITY FULL and no catalog shape: its key is unknown", zap.Stringer("table", id))
	}
	for _, ci := range s.Columns {
		noteTextFallback(d.log, &ci.Type)
	}
	d.rels[rel.RelationID] = s
	d.mu.Lock()
	d.latest[id] = s
	d.mu.Unlock()
	if prev != nil {
		d.log.Info("table shape changed", zap.Stringer("table", id), zap.Int("generation", gen))
	}
	return nil
}

// identityCarriesKey refuses a shape whose replica identity is an index on
// other columns than its key (the primary key): its deletes and key
// updates would carry that index's columns, so the sinks could not find
// the rows they change, and an update of the key alone would carry no old
// image at all. Preflight refuses such a table at start; this is the
// switch made while the stream runs.
func identityCarriesKey(rel *pglogrepl.RelationMessage, s *TableShape) error {
	if rel.ReplicaIdentity != 'i' || len(s.Table.KeyIdx) == 0 {
		return nil
	}
	var flagged []int
	for i, c := range rel.Columns {
		if c.Flags&1 != 0 {
			flagged = append(flagged, i)
		}
	}
	key := slices.Sorted(slices.Values(s.Table.KeyIdx))
	if slices.Equal(flagged, key) {
		return nil
	}
	t := s.Table.ID.Schema + "." + s.Table.ID.Table
	return fmt.Errorf("table %s now has REPLICA IDENTITY USING INDEX on other columns than its primary key: its deletes and "+
		"primary-key updates no longer carry the key the sinks find rows by. Run `ALTER TABLE %s REPLICA IDENTITY DEFAULT;` as its "+
		"owner; the changes written in between cannot be keyed, so then restart with --reset-offsets to snapshot again, or "+
		"remove the table from the pipeline", t, t)
}

// mergeShapes returns primary extended by the columns of fallback it lacks
// (by name), so metadata of columns the catalog no longer has (dropped
// since the change being decoded) still comes from the previous shape. Keys
// and primary-key status are primary's.
func mergeShapes(primary, fallback *TableShape) *TableShape {
	if fallback == nil {
		return primary
	}
	have := map[string]bool{}
	for _, c := range primary.Columns {
		have[c.Name] = true
	}
	m := *primary
	t := *primary.Table
	m.Columns = append([]ColumnInfo(nil), primary.Columns...)
	t.Columns = append([]pipeline.Column(nil), primary.Table.Columns...)
	for i, c := range fallback.Columns {
		if !have[c.Name] {
			m.Columns = append(m.Columns, c)
			col := fallback.Table.Columns[i]
			col.Key = false
			t.Columns = append(t.Columns, col)
		}
	}
	m.Table = &t
	return &m
}

// change turns one Insert/Update/Delete/Truncate into records of tx. A
// value the decoder cannot read makes the change a dead letter carrying
// the raw message and the reason; the transaction goes on (Invariant 7).
func (d *Decoder) change(ctx context.Context, tx *txnState, msg pglogrepl.Message, raw []byte, walStart pglogrepl.LSN, emit func(Chunk) error) error {
	err := d.changeRecords(ctx, tx, msg, walStart, emit)
	var de *DecodeError
	if err == nil || !errors.As(err, &de) || de.Column == "" || de.Text == nil {
		return err
	}
	pos, _ := json.Marshal(map[string]string{"lsn": walStart.String(), "commit_lsn": tx.commitLSN.String()})
	tx.dead = append(tx.dead, pipeline.DeadLetter{
		Time: time.Now().UTC(), Stage: "source", Table: de.Table.String(), Op: changeOp(msg),
		Position: pos, Error: de.Error(), Raw: append([]byte(nil), raw...),
	})
	d.log.Warn("undecodable change sent to the dead-letter queue", zap.Stringer("table", de.Table),
		zap.String("column", de.Column), zap.Stringer("lsn", walStart), zap.Error(de.Err))
	return nil
}

func changeOp(msg pglogrepl.Message) string {
	switch msg.(type) {
	case *pglogrepl.InsertMessageV2, *pglogrepl.InsertMessage:
		return pipeline.OpInsert.String()
	case *pglogrepl.UpdateMessageV2, *pglogrepl.UpdateMessage:
		return pipeline.OpUpdate.String()
	case *pglogrepl.DeleteMessageV2, *pglogrepl.DeleteMessage:
		return pipeline.OpDelete.String()
	}
	return ""
}

// changeRecords decodes one change message into records of tx.
func (d *Decoder) changeRecords(ctx context.Context, tx *txnState, msg pglogrepl.Message, walStart pglogrepl.LSN, emit func(Chunk) error) error {
	switch m := msg.(type) {
	case *pglogrepl.InsertMessageV2:
		s, err := d.relation(m.RelationID, walStart)
		if err != nil {
			return err
		}
		after, err := d.tuple(s, m.Tuple, walStart)
		if err != nil {
			return err
		}
		d.noteKey(tx, s, m.Tuple, keyPut, after)
		return d.add(tx, pipeline.Record{Op: pipeline.OpInsert, Table: s.Table, After: after}, emit)
	case *pglogrepl.UpdateMessageV2:
		return d.update(ctx, tx, &m.UpdateMessage, walStart, emit)
	case *pglogrepl.DeleteMessageV2:
		s, err := d.relation(m.RelationID, walStart)
		if err != nil {
			return err
		}
		before, err := d.tuple(s, m.OldTuple, walStart)
		if err != nil {
			return err
		}
		d.noteKey(tx, s, m.OldTuple, keyLeft, nil)
		return d.add(tx, pipeline.Record{Op: pipeline.OpDelete, Table: s.Table, Before: before}, emit)
	case *pglogrepl.TruncateMessageV2:
		for _, id := range m.RelationIDs {
			s, err := d.relation(id, walStart)
			if err != nil {
				return err
			}
			if err := d.add(tx, pipeline.Record{Op: pipeline.OpTruncate, Table: s.Table}, emit); err != nil {
				return err
			}
		}
	}
	return nil
}

// update emits an update, or a delete of the old key followed by an insert
// of the new one when the key changed. Unchanged TOAST values ('u') are
// taken from the old tuple when it carries them (REPLICA IDENTITY FULL),
// else they are pipeline.UnchangedValue — never NULL.
func (d *Decoder) update(ctx context.Context, tx *txnState, m *pglogrepl.UpdateMessage, walStart pglogrepl.LSN, emit func(Chunk) error) error {
	s, err := d.relation(m.RelationID, walStart)
	if err != nil {
		return err
	}
	after, err := d.tuple(s, m.NewTuple, walStart)
	if err != nil {
		return err
	}
	var before []any
	if m.OldTuple != nil {
		if before, err = d.tuple(s, m.OldTuple, walStart); err != nil {
			return err
		}
		for i, c := range m.NewTuple.Columns {
			if c.DataType == pglogrepl.TupleDataTypeToast && m.OldTuple.Columns[i].DataType == pglogrepl.TupleDataTypeText {
				after[i] = before[i]
			}
		}
	}
	if m.OldTuple != nil && keyChanged(s.Table.KeyIdx, m.OldTuple, m.NewTuple) {
		d.noteKey(tx, s, m.OldTuple, keyLeft, nil)
		d.noteKey(tx, s, m.NewTuple, keyPut, after) // after as refetchUnchanged completes it
		if err := d.add(tx, pipeline.Record{Op: pipeline.OpDelete, Table: s.Table, Before: before}, emit); err != nil {
			return err
		}
		if err := d.refetchUnchanged(ctx, tx.xid, s, m.NewTuple, after); err != nil {
			return err
		}
		return d.add(tx, pipeline.Record{Op: pipeline.OpInsert, Table: s.Table, After: after}, emit)
	}
	d.noteKey(tx, s, m.NewTuple, keyTouched, after)
	return d.add(tx, pipeline.Record{Op: pipeline.OpUpdate, Table: s.Table, Before: before, After: after}, emit)
}

// keyChanged compares the key columns' text of the old and new tuple; both
// come from the same output function, so equal values have equal text.
func keyChanged(keyIdx []int, old, new *pglogrepl.TupleData) bool {
	for _, k := range keyIdx {
		o, n := old.Columns[k], new.Columns[k]
		if o.DataType == pglogrepl.TupleDataTypeToast || n.DataType == pglogrepl.TupleDataTypeToast {
			continue
		}
		if o.DataType != n.DataType || string(o.Data) != string(n.Data) {
			return true
		}
	}
	return false
}

// add versions a record, appends it and emits a non-final chunk when the
// chunk is full, so memory stays bounded (Invariant 6).
func (d *Decoder) add(tx *txnState, r pipeline.Record, emit func(Chunk) error) error {
	r.Version = streamVersion(d.opts.Generation, tx.commitLSN, tx.index)
	tx.index++
	if r.Table != nil && d.notCaptured(r.Table) {
		return nil
	}
	r.EventTime = tx.commitTime
	r.TxID = uint64(tx.xid)
	r.Size = pipeline.EstimateSize(&r)
	if tx.records == nil {
		// Size the chunk from the previous transaction (or, after a full
		// chunk, to a full chunk) instead of growing it from empty: the
		// growth copied every record of a large transaction about twice.
		hint := d.lastTxnRecords
		if tx.index > 1 {
			hint = d.opts.ChunkRecords
		}
		tx.records = make([]pipeline.Record, 0, min(max(hint, 1), d.opts.ChunkRecords))
	}
	tx.records = append(tx.records, r)
	// Invariant 6: a transaction is handed over in bounded chunks instead
	// of being held whole.
	if len(tx.records) >= d.opts.ChunkRecords {
		return d.flush(tx, false, 0, emit)
	}
	return nil
}

func (d *Decoder) relation(id uint32, walStart pglogrepl.LSN) (*TableShape, error) {
	s := d.rels[id]
	if s == nil {
		return nil, &DecodeError{WALStart: walStart, Err: fmt.Errorf("change for relation %d without a Relation message", id)}
	}
	return s, nil
}

// tuple decodes a tuple aligned with the shape's columns: 'n' is nil, 'u'
// is pipeline.UnchangedValue, 't' goes through DecodeText. For a key-only
// old tuple ('K') the non-key columns arrive as 'n' and stay nil.
func (d *Decoder) tuple(s *TableShape, t *pglogrepl.TupleData, walStart pglogrepl.LSN) ([]any, error) {
	if t == nil {
		return nil, nil
	}
	if len(t.Columns) != len(s.Columns) {
		return nil, &DecodeError{WALStart: walStart, Table: s.Table.ID,
			Err: fmt.Errorf("tuple has %d columns, relation has %d", len(t.Columns), len(s.Columns))}
	}
	out := make([]any, len(t.Columns))
	for i, c := range t.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
		case pglogrepl.TupleDataTypeToast:
			out[i] = pipeline.UnchangedValue
		case pglogrepl.TupleDataTypeText:
			v, err := DecodeText(s.Columns[i], c.Data)
			if err != nil {
				// Invariant 7: the raw text travels with the error so the
				// source can dead-letter the record.
				return nil, &DecodeError{WALStart: walStart, Table: s.Table.ID, Column: s.Columns[i].Name, Text: c.Data, Err: err}
			}
			out[i] = v
		default:
			return nil, &DecodeError{WALStart: walStart, Table: s.Table.ID, Column: s.Columns[i].Name,
				Err: fmt.Errorf("unsupported tuple data kind %q", c.DataType)}
		}
	}
	return out, nil
}

// parseInsert decodes an Insert message as pglogrepl.ParseV2 does, but
// with the tuple's columns and values in three allocations instead of two
// per column: pglogrepl's tuple decoding was the largest allocation site of
// a drain (BenchmarkDecoderReplay).
func parseInsert(data []byte, inStream bool) (*pglogrepl.InsertMessageV2, error) {
	m := &pglogrepl.InsertMessageV2{}
	src := data[1:]
	if inStream {
		if len(src) < 4 {
			return nil, errors.New("insert message too short")
		}
		m.Xid = binary.BigEndian.Uint32(src)
		src = src[4:]
	}
	if len(src) < 5 {
		return nil, errors.New("insert message too short")
	}
	if src[4] != 'N' {
		return nil, fmt.Errorf("insert message with tuple type %q, want 'N'", src[4])
	}
	m.RelationID = binary.BigEndian.Uint32(src)
	t, err := parseTupleData(src[5:])
	if err != nil {
		return nil, fmt.Errorf("insert message: %w", err)
	}
	m.Tuple = t
	m.SetType(pglogrepl.MessageTypeInsert)
	return m, nil
}

// parseTupleData decodes TupleData like pglogrepl.TupleData.Decode. The
// values are sub-slices (capacity-limited) of one copy of src, as the caller
// may reuse src.
func parseTupleData(src []byte) (*pglogrepl.TupleData, error) {
	if len(src) < 2 {
		return nil, errors.New("tuple data too short")
	}
	n := int(binary.BigEndian.Uint16(src))
	buf := append([]byte(nil), src[2:]...)
	cols := make([]pglogrepl.TupleDataColumn, n)
	ptrs := make([]*pglogrepl.TupleDataColumn, n)
	off := 0
	for i := range cols {
		if off >= len(buf) {
			return nil, fmt.Errorf("tuple data ends before column %d of %d", i+1, n)
		}
		c := &cols[i]
		c.DataType = buf[off]
		off++
		switch c.DataType {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(buf)-off < 4 {
				return nil, fmt.Errorf("tuple data ends in the length of column %d", i+1)
			}
			l := binary.BigEndian.Uint32(buf[off:])
			off += 4
			if uint64(l) > uint64(len(buf)-off) {
				return nil, fmt.Errorf("column %d of %d bytes overruns the tuple data", i+1, l)
			}
			end := off + int(l)
			c.Length, c.Data = l, buf[off:end:end]
			off = end
		}
		ptrs[i] = c
	}
	return &pglogrepl.TupleData{ColumnNum: uint16(n), Columns: ptrs}, nil
}

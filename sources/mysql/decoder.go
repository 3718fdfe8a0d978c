package mysql

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// txItem is one decoded piece of the stream: a whole transaction (Pos
// set), or a chunk of a large one that is still open (Pos nil).
type txItem struct {
	records    []pipeline.Record
	dead       []pipeline.DeadLetter
	pos        pipeline.Position
	at         Position // the decoded form of pos
	commitTime time.Time
}

// DDLError stops the pipeline at a statement the source cannot follow.
type DDLError struct {
	Statement string
	Position  string
	Reason    string
	// Fix says what to do; empty: list the table in ignore_ddl_tables.
	Fix string
}

func (e *DDLError) Error() string {
	fix := e.Fix
	if fix == "" {
		fix = "list the table in ignore_ddl_tables to go on without it"
	}
	return fmt.Sprintf("mysql source: %s at %s: %q; %s", e.Reason, e.Position, e.Statement, fix)
}

// decoder turns binlog events into transactions. It is fed by one goroutine
// and keeps the open transaction between events.
type decoder struct {
	flavor string
	server string
	epoch  uint64
	shapes *shapes
	conv   converter
	// ignoreDDL lists the captured tables whose unreadable statements
	// are skipped (with a warning) instead of stopping the pipeline.
	ignoreDDL func(db, table string) bool
	// cascadeOK lists the captured tables accepted as the children of
	// cascading foreign keys (cascade_tables; nil: none).
	cascadeOK func(db, table string) bool
	captured  []tableName
	chunk     int
	log       *zap.Logger
	onDDL     func()
	// marks recognizes the incremental snapshot's watermark rows (nil:
	// none).
	marks *watermarks
	// pend are the read-only snapshot's watermarks (readonly.go; nil:
	// none).
	pend *positionMarks
	// foreign: reached's file and offset are another server's (the
	// stream failed over and no commit of the new server arrived yet);
	// versions there could sort above the new server's next changes.
	foreign bool
	// partialSeen: the tables a partial row image was logged for.
	partialSeen map[pipeline.TableID]bool

	file    string
	fileNum uint64

	// The open transaction: from its GTID event to its commit.
	open    bool
	inTx    bool // BEGIN seen: a QUERY is part of it, not a standalone statement
	txFile  uint64
	txStart uint32
	txTime  time.Time
	txID    uint64
	nrows   int // row changes so far: the next row index
	recs    []pipeline.Record
	dead    []pipeline.DeadLetter
	// xa marks the open group as an XA PREPARE; prepared holds the rows
	// of prepared XA transactions until their XA COMMIT (see xa.go).
	xa       bool
	prepared map[string]*xaTxn
	// reached is the last commit the stream read, whether or not a hold
	// kept its position from the items (holdsPositions).
	reached Position

	// handed remembers how many rows of a large transaction already left
	// in chunks, so that when a reconnect re-sends it from its GTID the
	// same rows are not handed over twice.
	handed struct {
		file  uint64
		start uint32
		rows  int
	}
}

// event handles one binlog event and calls emit for each finished item.
func (d *decoder) event(ev *replication.BinlogEvent, emit func(txItem) error) error {
	h := ev.Header
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		name := string(e.NextLogName)
		n, err := fileNumber(name)
		if err != nil {
			return err
		}
		d.file, d.fileNum = name, n
	case *replication.MariadbGTIDEvent:
		d.begin(h, e.GTID.SequenceNumber)
		d.xa = e.Flags&flPreparedXA != 0
	case *replication.GTIDEvent:
		d.begin(h, uint64(e.GNO))
	case *replication.GtidTaggedLogEvent:
		d.begin(h, uint64(e.GNO))
	case *replication.TableMapEvent:
		// Decoded lazily by the rows events that point to it.
	case *replication.RowsEvent:
		if err := d.rows(e); err != nil {
			return err
		}
		return d.flushChunk(emit)
	case *replication.XIDEvent:
		return d.commit(h, e.GSet, emit)
	case *replication.QueryEvent:
		return d.query(h, e, emit)
	case *replication.GenericEvent:
		if h.EventType == replication.XA_PREPARE_LOG_EVENT {
			return d.xaPrepared(e.Data)
		}
	case *replication.TransactionPayloadEvent:
		for _, inner := range e.Events {
			// Inner events carry positions relative to the payload; the
			// commit's end is the payload event's own.
			inner.Header.LogPos = h.LogPos
			if err := d.event(inner, emit); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *decoder) begin(h *replication.EventHeader, id uint64) {
	d.open, d.inTx, d.xa = true, false, false
	d.txFile, d.txStart = d.fileNum, h.LogPos-h.EventSize
	d.txTime = time.Unix(int64(h.Timestamp), 0).UTC()
	d.txID = id
	d.nrows = 0
	d.recs, d.dead = d.recs[:0], d.dead[:0]
}

// skipped reports whether row index i of the open transaction already
// left in a chunk before a reconnect.
func (d *decoder) skipped(i int) bool {
	return d.handed.file == d.txFile && d.handed.start == d.txStart && i < d.handed.rows
}

func (d *decoder) rows(e *replication.RowsEvent) error {
	if !d.open {
		return errors.New("mysql source: a rows event outside a transaction (no GTID event before it): is gtid_mode on?")
	}
	if d.marks.is(e.Table) {
		d.watermark(e)
		return nil
	}
	sh, err := d.shapes.of(e.Table)
	if err != nil {
		return pipeline.Fatal(err)
	}
	if !sh.captured {
		return nil
	}
	var op pipeline.Op
	step := 1
	switch e.Type() {
	case replication.EnumRowsEventTypeInsert:
		op = pipeline.OpInsert
	case replication.EnumRowsEventTypeUpdate:
		op, step = pipeline.OpUpdate, 2
	case replication.EnumRowsEventTypeDelete:
		op = pipeline.OpDelete
	default:
		return pipeline.Fatal(fmt.Errorf("mysql source: rows event of %s.%s is a partial JSON update; set binlog_row_value_options=''",
			e.Table.Schema, e.Table.Table))
	}
	for r := 0; r+step <= len(e.Rows); r += step {
		i := d.nrows
		d.nrows++
		if d.skipped(i) {
			continue
		}
		if op == pipeline.OpInsert && keyLeftOut(sh.table.KeyIdx, e.SkippedColumns[r]) {
			// A partial image without the new row's key (a key column
			// set by its DEFAULT): the row cannot be found by key, so the
			// table is read again (Invariant 13).
			d.log.Warn("an insert's row image left its key out (binlog_row_image MINIMAL and a key column's DEFAULT): the table will be read again",
				zap.Stringer("table", sh.table.ID), zap.String("at", fmt.Sprintf("%s:%d", d.file, d.txStart)))
			d.recs = append(d.recs, d.rewriteRecord(tableName{db: string(e.Table.Schema), table: string(e.Table.Table)}, i))
			continue
		}
		rec := pipeline.Record{Op: op, Table: sh.table, EventTime: d.txTime, TxID: d.txID,
			Version: streamVersion(d.epoch, d.txFile, d.txStart, i)}
		var cerr error
		switch op {
		case pipeline.OpInsert:
			if rec.After, cerr = d.image(sh, e.Rows[r]); cerr == nil && len(e.SkippedColumns[r]) > 0 {
				leftOut(rec.After, e.SkippedColumns[r], nil, nil)
				// Invariant 13: the sinks hold no value to keep for the
				// columns left out; the engine reads the row again.
				rec.Refetch = true
			}
		case pipeline.OpDelete:
			rec.Before, cerr = d.image(sh, e.Rows[r])
		case pipeline.OpUpdate:
			rec.Before, cerr = d.image(sh, e.Rows[r])
			if cerr == nil {
				if rec.After, cerr = d.image(sh, e.Rows[r+1]); cerr == nil {
					leftOut(rec.After, e.SkippedColumns[r+1], rec.Before, e.SkippedColumns[r])
				}
			}
		}
		if len(e.SkippedColumns[r]) > 0 || step == 2 && len(e.SkippedColumns[r+1]) > 0 {
			d.partial(sh.table.ID)
		}
		if cerr != nil {
			// Invariant 7: the change goes to the DLQ, the stream goes on.
			d.dead = append(d.dead, deadLetter(sh.table, op, rec.Version, e.Rows[r:r+step], cerr))
			continue
		}
		if op == pipeline.OpUpdate && keyChanged(sh.table.KeyIdx, rec.Before, rec.After) {
			// A key change is the old key's delete, then the new key's
			// insert (the record model's contract), each with its index.
			del := rec
			del.Op, del.After = pipeline.OpDelete, nil
			del.Size = pipeline.EstimateSize(&del)
			d.recs = append(d.recs, del)
			rec.Op, rec.Before = pipeline.OpInsert, nil
			// Invariant 13: no sink holds the new key's values to keep.
			rec.Refetch = slices.Contains(rec.After, any(pipeline.UnchangedValue))
			j := d.nrows
			d.nrows++
			rec.Version = streamVersion(d.epoch, d.txFile, d.txStart, j)
			if d.skipped(j) {
				continue
			}
		}
		rec.Size = pipeline.EstimateSize(&rec)
		d.recs = append(d.recs, rec)
	}
	return nil
}

// keyChanged reports whether an update moved the row to another key.
func keyChanged(keyIdx []int, before, after []any) bool {
	for _, k := range keyIdx {
		if !sameValue(before[k], after[k]) {
			return true
		}
	}
	return false
}

// sameValue compares two record-model values, without reflection for the
// common key types.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case uint64:
		y, ok := b.(uint64)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	}
	return reflect.DeepEqual(a, b)
}

// image converts one row image. Columns the server left out (a session
// writing binlog_row_image=MINIMAL or NOBLOB: those its statement did not
// set, and in a before image those not needed to find the row) are NULL.
func (d *decoder) image(sh *shape, row []any) ([]any, error) {
	if len(row) != len(sh.descs) {
		return nil, fmt.Errorf("row has %d columns, the table map %d", len(row), len(sh.descs))
	}
	// Converted in place: the row is go-mysql's, decoded for us alone.
	out := row
	for i, v := range row {
		x, err := d.conv.value(&sh.descs[i], v, true)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", sh.descs[i].name, err)
		}
		out[i] = x
	}
	return out, nil
}

// keyLeftOut reports whether a key column is among the skipped ones.
func keyLeftOut(keyIdx, skipped []int) bool {
	for _, k := range keyIdx {
		if slices.Contains(skipped, k) {
			return true
		}
	}
	return false
}

// partial logs, once per table and connection, that a session writes
// partial row images.
func (d *decoder) partial(id pipeline.TableID) {
	if d.partialSeen[id] {
		return
	}
	if d.partialSeen == nil {
		d.partialSeen = map[pipeline.TableID]bool{}
	}
	d.partialSeen[id] = true
	d.log.Warn("a session writes partial row images (binlog_row_image MINIMAL or NOBLOB): inserts that leave columns out are read again from the table, and before images lack the columns left out; "+
		"set binlog_row_image=FULL for every session (SET GLOBAL binlog_row_image = 'FULL', and revoke BINLOG ADMIN or SUPER from the applications that set it)",
		zap.Stringer("table", id), zap.String("at", fmt.Sprintf("%s:%d", d.file, d.txStart)))
}

// leftOut sets the columns an after image left out (skipped): the statement
// did not change them, so each is the before image's value when it
// carries one (not in beforeSkipped; a key column among them, so the
// update stays on its key), else Unchanged: the sinks keep what they hold.
func leftOut(after []any, skipped []int, before []any, beforeSkipped []int) {
	for _, i := range skipped {
		after[i] = pipeline.UnchangedValue
		if before != nil && !slices.Contains(beforeSkipped, i) {
			after[i] = before[i]
		}
	}
}

// deadLetter makes the dead letter of a change the source cannot
// represent. The binlog's bytes are not kept; Raw is the change's row
// images as decoded, as JSON (columns before the failing one already in the
// record model; bytes that are UTF-8 text shown as text, others base64).
func deadLetter(t *pipeline.Table, op pipeline.Op, v pipeline.Version, rows [][]any, err error) pipeline.DeadLetter {
	shown := make([][]any, len(rows))
	for i, row := range rows {
		shown[i] = make([]any, len(row))
		for j, x := range row {
			if b, ok := x.([]byte); ok && utf8.Valid(b) {
				x = string(b)
			}
			shown[i][j] = x
		}
	}
	raw, merr := json.Marshal(map[string]any{"rows": shown})
	if merr != nil {
		raw = []byte(fmt.Sprint(rows))
	}
	return pipeline.DeadLetter{Time: time.Now().UTC(), Stage: "source", Table: t.ID.String(), Op: op.String(),
		Version: v.String(), Error: err.Error(), Raw: raw}
}

// query handles a QUERY event: BEGIN, COMMIT, or a statement (DDL).
func (d *decoder) query(h *replication.EventHeader, e *replication.QueryEvent, emit func(txItem) error) error {
	sql := strings.TrimSpace(string(e.Query))
	word := strings.ToUpper(firstWord(sql))
	if word == "XA" {
		if handled, err := d.xaStatement(h, e, sql, emit); handled || err != nil {
			return err
		}
	}
	switch {
	case word == "BEGIN" || strings.EqualFold(sql, "START TRANSACTION"):
		d.inTx = true
		return nil
	case d.inTx && (word == "COMMIT" || strings.EqualFold(sql, "ROLLBACK")):
		// COMMIT ends transactions on non-transactional engines; a
		// ROLLBACK logged by the server keeps their changes, which did
		// happen.
		return d.commit(h, e.GSet, emit)
	case d.inTx:
		return nil // SAVEPOINT and the like inside a transaction
	}
	if err := d.statement(sql, string(e.Schema), h); err != nil {
		return err
	}
	if !d.open {
		return nil
	}
	return d.commit(h, e.GSet, emit)
}

// statement applies a standalone statement (DDL) to the captured tables.
func (d *decoder) statement(sql, db string, h *replication.EventHeader) error {
	c := classifyDDL(sql, db)
	if c.Kind == ddlOther || c.Temporary {
		return nil // a temporary table changes no captured one, even one it shadows
	}
	if d.onDDL != nil {
		d.onDDL()
	}
	where := fmt.Sprintf("%s:%d", d.file, h.LogPos)
	if err := d.checkCascade(c, sql, where); err != nil {
		return err
	}
	switch c.Kind {
	case ddlTruncate, ddlReplace:
		for _, n := range c.Tables {
			d.truncate(n)
		}
	case ddlAlter:
		// The next TABLE_MAP shows the new shape; the DEFAULTs of added
		// columns (which existing rows now hold) only the statement gives.
		added := addedColumns(sql)
		rewrite := rewritesRows(sql, added)
		for _, n := range c.Tables {
			if d.isCaptured(n) {
				d.shapes.noteAdded(tableID(n), added)
				d.shapes.markPending(tableID(n))
				if rewrite {
					d.rewrite(n, h)
				}
			}
		}
	case ddlDrop:
		// A dropped table has no rows: the sinks let go of its rows as for
		// a TRUNCATE, so a table created again under the name (DROP then
		// CREATE, a reload) starts empty there too, with no ghost of the
		// old one's rows. DROP DATABASE drops its captured tables.
		if c.Database != "" {
			for _, n := range d.captured {
				if strings.EqualFold(n.db, c.Database) {
					c.Tables = append(c.Tables, n)
				}
			}
		}
		for _, n := range c.Tables {
			if d.isCaptured(n) {
				d.truncate(n)
				d.shapes.forget(tableID(n))
				d.log.Warn("a captured table was dropped; the sinks remove its rows", zap.String("table", n.db+"."+n.table), zap.String("at", where))
			}
		}
	case ddlRename:
		for i, n := range c.Tables {
			if d.isCaptured(n) {
				d.shapes.forget(tableID(n))
				d.log.Warn("a captured table was renamed; changes under its new name are not captured unless it is listed",
					zap.String("table", n.db+"."+n.table), zap.String("new_name", c.Renamed[i].db+"."+c.Renamed[i].table), zap.String("at", where))
			}
		}
		for _, n := range c.Renamed {
			if d.isCaptured(n) {
				// Another table takes a captured name (an online schema
				// change's swap: RENAME TABLE t TO t_old, t_new TO t): its
				// rows were written under a name the pipeline does not
				// capture, so it is read again, and its shape goes out
				// even if no row of it changes (Invariant 11).
				d.shapes.forget(tableID(n))
				d.shapes.markPending(tableID(n))
				d.rewrite(n, h)
			}
		}
	case ddlUnknown, ddlRows:
		for _, n := range d.captured {
			if !mentions(sql, db, n) {
				continue
			}
			if d.ignoreDDL != nil && d.ignoreDDL(n.db, n.table) {
				d.log.Warn("skipping a statement the source cannot read (the table is in ignore_ddl_tables)",
					zap.String("statement", sql), zap.String("at", where))
				continue
			}
			if c.Kind == ddlRows {
				return pipeline.Fatal(&DDLError{Statement: sql, Position: where,
					Reason: fmt.Sprintf("a change of captured table %s.%s was written as a statement, not as rows (a session with binlog_format STATEMENT or MIXED), so the binlog does not say which rows it changed", n.db, n.table),
					Fix: fmt.Sprintf("set binlog_format=ROW for every session (SET GLOBAL binlog_format = 'ROW', and revoke BINLOG ADMIN or SUPER from the applications that change it); "+
						"to go on, list %s.%s in ignore_ddl_tables and, once sluice runs past the statement, run sluice verify --repair --table %[1]s.%[2]s", n.db, n.table)})
			}
			return pipeline.Fatal(&DDLError{Statement: sql, Position: where,
				Reason: fmt.Sprintf("cannot tell what a statement does to captured table %s.%s", n.db, n.table)})
		}
	}
	return nil
}

// truncate adds an OpTruncate of n, if captured, at the statement's place
// in the stream.
func (d *decoder) truncate(n tableName) {
	t := d.capturedTable(n)
	if t == nil {
		return
	}
	i := d.nrows
	d.nrows++
	if d.skipped(i) {
		return
	}
	d.recs = append(d.recs, pipeline.Record{Op: pipeline.OpTruncate, Table: t, EventTime: d.txTime, TxID: d.txID,
		Version: streamVersion(d.epoch, d.txFile, d.txStart, i), Size: 128})
}

// checkCascade stops the source at a statement that gives a captured
// table a foreign key with a cascading action, unless the table is in
// cascade_tables: the binlog carries no row a cascade changes (preflight's
// checkCascades, for the keys a table had at start).
func (d *decoder) checkCascade(c ddl, sql, where string) error {
	if c.Kind != ddlAlter && c.Kind != ddlCreate && c.Kind != ddlReplace || !cascades(sql) {
		return nil
	}
	for _, n := range c.Tables {
		if !d.isCaptured(n) || d.cascadeOK != nil && d.cascadeOK(n.db, n.table) {
			continue
		}
		t := n.db + "." + n.table
		return pipeline.Fatal(&DDLError{Statement: sql, Position: where,
			Reason: fmt.Sprintf("the statement gives captured table %s a foreign key with a cascading action, and the binlog carries no row a cascade changes, so its sinks would keep the rows it deletes or changes", t),
			Fix: fmt.Sprintf("do the cascade in a trigger on the parent table instead, whose changes the binlog carries; or list %s in cascade_tables, "+
				"restart, and run sluice verify --repair --table %[1]s after cascades", t)})
	}
	return nil
}

// rewrite records, at the statement's place in the stream, that n's
// existing rows may hold values no row event carried: an OpRewrite, which
// the snapshot engine consumes by reading the table again.
func (d *decoder) rewrite(n tableName, h *replication.EventHeader) {
	i := d.nrows
	d.nrows++
	if d.skipped(i) {
		return
	}
	d.log.Info("table altered in a way that may change its rows with no row event: it will be read again",
		zap.String("table", n.db+"."+n.table), zap.String("at", fmt.Sprintf("%s:%d", d.file, h.LogPos)))
	d.recs = append(d.recs, d.rewriteRecord(n, i))
}

// rewriteRecord is the OpRewrite of table n at row index i of the open
// transaction.
func (d *decoder) rewriteRecord(n tableName, i int) pipeline.Record {
	c, _ := d.capturedName(n)
	id := tableID(c) // as captured: the engine matches names exactly
	return pipeline.Record{Op: pipeline.OpRewrite, Table: &pipeline.Table{ID: id}, EventTime: d.txTime, TxID: d.txID,
		Version: streamVersion(d.epoch, d.txFile, d.txStart, i), Size: 128}
}

func (d *decoder) isCaptured(n tableName) bool {
	_, ok := d.capturedName(n)
	return ok
}

// capturedName returns n as the pipeline captures it (the database name
// matches without regard to case), and whether it does.
func (d *decoder) capturedName(n tableName) (tableName, bool) {
	for _, c := range d.captured {
		if strings.EqualFold(c.db, n.db) && c.table == n.table {
			return c, true
		}
	}
	return n, false
}

// capturedTable returns the latest shape of a captured table.
func (d *decoder) capturedTable(n tableName) *pipeline.Table {
	if !d.isCaptured(n) {
		return nil
	}
	for id, sh := range d.shapes.latest {
		if strings.EqualFold(id.Schema, n.db) && id.Table == n.table {
			return sh.table
		}
	}
	return nil
}

// commit closes the open transaction at the end of event h (Invariant 2:
// positions only ever sit on commits). A transaction on tables that are
// not captured still yields its position, with no records: that is how an
// otherwise idle pipeline advances (Invariant 8; the server keeps its
// binlog by retention, so there is no slot to release and no heartbeat
// to write).
func (d *decoder) commit(h *replication.EventHeader, gset gomysql.GTIDSet, emit func(txItem) error) error {
	if !d.open {
		return nil // the tail of a transaction whose GTID event came before our start
	}
	if gset == nil {
		return errors.New("mysql source: a commit without a GTID set: is gtid_mode on?")
	}
	at := Position{Flavor: d.flavor, GTID: gset.String(), File: d.file, Pos: h.LogPos, Server: d.server, Epoch: d.epoch}
	d.reached, d.foreign = at, false
	it := txItem{pos: at.Encode(), at: at, commitTime: d.txTime, records: d.takeRecords()}
	if d.holdsPositions() {
		it.pos, it.at = nil, Position{}
	}
	it.dead = append([]pipeline.DeadLetter(nil), d.dead...)
	for i := range it.records {
		it.records[i].Pos = it.pos
	}
	for i := range it.dead {
		it.dead[i].Position = json.RawMessage(it.pos)
	}
	d.open, d.inTx = false, false
	d.recs, d.dead = d.recs[:0], d.dead[:0]
	d.handed.rows = 0
	return emit(it)
}

// holdsPositions reports whether no position may be handed over now, so
// that a checkpoint stays where a restart reads again what only this
// session knows:
//   - a prepared XA is open: no position may pass its prepare (xa.go);
//   - an ALTER added columns whose DEFAULTs no shape has carried yet: a
//     checkpoint past it would lose them in a crash, since the binlog's
//     next TABLE_MAP and the catalog show the column but not the value the
//     rows older than the ALTER hold (added.go, Invariant 11).
func (d *decoder) holdsPositions() bool {
	return len(d.prepared) > 0 || d.shapes.awaitingDefaults()
}

// flushChunk hands over the rows of a large open transaction so far, with
// no position.
func (d *decoder) flushChunk(emit func(txItem) error) error {
	if !d.open || d.xa || len(d.recs)+len(d.dead) < d.chunk {
		return nil
	}
	it := txItem{records: d.takeRecords(), dead: append([]pipeline.DeadLetter(nil), d.dead...), commitTime: d.txTime}
	d.handed.file, d.handed.start, d.handed.rows = d.txFile, d.txStart, d.nrows
	d.recs, d.dead = d.recs[:0], d.dead[:0]
	return emit(it)
}

// takeRecords hands over a copy of the records gathered so far and keeps
// the array for the next ones.
func (d *decoder) takeRecords() []pipeline.Record {
	out := append([]pipeline.Record(nil), d.recs...)
	d.recs = d.recs[:0]
	return out
}

func firstWord(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ';' {
			return s[:i]
		}
	}
	return s
}

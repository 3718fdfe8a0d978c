package mysql

import (
	"context"
	"strings"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A shape change with no row change after it (Invariant 11). The binlog
// describes a table only in the TABLE_MAP before its rows, so after an
// ALTER of a captured table (or at the start of a session, for whatever
// changed while sluice was away) the table is pending until its next
// TABLE_MAP. While some table is pending, the stream reads its shape from
// the catalog at most once per heartbeat interval, between two reads of
// the server's GTID position G1 and G2. The catalog read lies in [G1, G2],
// so once the stream has read up to G2 with no further ALTER of the table,
// that is the table's shape at G2, and it goes out as an OpShape record
// positioned there. A new ALTER meanwhile discards the reading; a column
// the reading shows but no ALTER read so far added (an ALTER racing the
// reading, logged after G2) discards it too, so a shape never runs ahead
// of the DEFAULTs that fill its older rows.

// markPending notes an ALTER of id: its shape is unknown until its next
// TABLE_MAP.
func (s *shapes) markPending(id pipeline.TableID) {
	if s.pending == nil {
		s.pending = map[pipeline.TableID]int{}
	}
	s.pending[id]++
}

// shapeReading is one catalog reading of a pending table.
type shapeReading struct {
	descs []colDesc
	count int             // the table's pending count at the reading
	until gomysql.GTIDSet // G2
}

// shapeChecks is the stream's side: when it last read the catalog and
// the readings waiting for the stream to reach their G2.
type shapeChecks struct {
	last     time.Time
	readings map[pipeline.TableID]shapeReading
}

// readShapes reads the catalog shape of every pending table without a
// reading, at most once per interval.
func (st *streamer) readShapes(ctx context.Context) {
	sh := st.dec.shapes
	if len(sh.pending) == 0 || time.Since(st.checks.last) < st.s.opts.HeartbeatInterval {
		return
	}
	st.checks.last = time.Now()
	var todo []pipeline.TableID
	for id := range sh.pending {
		if _, ok := st.checks.readings[id]; !ok {
			todo = append(todo, id)
		}
	}
	if len(todo) == 0 {
		return
	}
	c, err := st.s.connect(ctx)
	if err != nil {
		st.log.Debug("shape check: connect", zap.Error(err))
		return
	}
	defer c.Close()
	g1, err := st.serverGTID(c)
	if err != nil {
		st.log.Debug("shape check: GTID position", zap.Error(err))
		return
	}
	got := map[pipeline.TableID][]colDesc{}
	for _, id := range todo {
		descs, err := catalogDescs(c, id.Schema, id.Table)
		if err != nil {
			if _, held := sh.added[id]; held {
				// The checkpoint waits for this table's shape
				// (decoder.holdsPositions): say so.
				st.log.Warn("shape check: the catalog read failed; the checkpoint waits for the table's next change or a successful read",
					zap.Stringer("table", id), zap.Error(err))
				continue
			}
			st.log.Debug("shape check: catalog", zap.Stringer("table", id), zap.Error(err))
			continue
		}
		got[id] = descs
	}
	g2, err := st.serverGTID(c)
	if err != nil || g2 == nil || !g2.Contain(g1) {
		return
	}
	if st.checks.readings == nil {
		st.checks.readings = map[pipeline.TableID]shapeReading{}
	}
	for id, descs := range got {
		st.checks.readings[id] = shapeReading{descs: descs, count: sh.pending[id], until: g2}
	}
}

func (st *streamer) serverGTID(c interface {
	Execute(string, ...any) (*gomysql.Result, error)
}) (gomysql.GTIDSet, error) {
	v := "@@GLOBAL.gtid_executed"
	if st.s.flavor == FlavorMariaDB {
		v = "@@GLOBAL.gtid_binlog_pos"
	}
	r, err := c.Execute("SELECT " + v)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	s, _ := getString(r, 0, 0)
	return gomysql.ParseGTIDSet(st.s.flavor, strings.ReplaceAll(s, "\n", ""))
}

// applyShapes emits an OpShape for each reading the stream has reached
// (its position at last holds G2) while the table stayed pending with no
// further ALTER. It runs between events, so last is a commit.
func (st *streamer) applyShapes(last Position, emit func(txItem) error) error {
	if len(st.checks.readings) == 0 || last.GTID == "" {
		return nil
	}
	at, err := last.gtidSet()
	if err != nil {
		return nil
	}
	sh := st.dec.shapes
	var recs []pipeline.Record
	for id, r := range st.checks.readings {
		n, pending := sh.pending[id]
		switch {
		case !pending || n != r.count:
			delete(st.checks.readings, id) // a TABLE_MAP or another ALTER came first
			continue
		case !at.Contain(r.until):
			continue
		}
		delete(st.checks.readings, id)
		t, ok := sh.fromCatalog(id, r.descs)
		if !ok {
			continue // a column no ALTER read so far added: read again later
		}
		delete(sh.pending, id)
		delete(sh.added, id) // the shape carried them (or they are gone)
		if t == nil {
			continue // unchanged
		}
		st.log.Info("table shape changed with no row change after it", zap.Stringer("table", id),
			zap.Int("generation", t.Generation), zap.String("gtid", last.GTID))
		rec := pipeline.Record{Op: pipeline.OpShape, Table: t, EventTime: time.Now().UTC(),
			Version: streamVersion(last.Epoch, st.dec.fileNum, last.Pos, 0)}
		rec.Size = pipeline.EstimateSize(&rec)
		recs = append(recs, rec)
	}
	if len(recs) == 0 {
		return nil
	}
	it := txItem{records: recs, pos: last.Encode(), at: last, commitTime: recs[0].EventTime}
	if st.dec.holdsPositions() {
		it.pos, it.at = nil, Position{}
	}
	for i := range recs {
		recs[i].Pos = it.pos
	}
	return emit(it)
}

// fromCatalog makes a catalog reading the latest shape of id. It returns
// the new *Table, or nil when the shape is unchanged; ok is false when the
// reading has a column the last shape lacks and no ALTER read so far
// added (so its DEFAULT is not known yet).
func (s *shapes) fromCatalog(id pipeline.TableID, descs []colDesc) (t *pipeline.Table, ok bool) {
	prev := s.latest[id]
	if prev != nil {
		had := map[string]bool{}
		for _, d := range prev.descs {
			had[strings.ToLower(d.name)] = true
		}
		for _, d := range descs {
			if _, noted := s.added[id][strings.ToLower(d.name)]; !had[strings.ToLower(d.name)] && !noted {
				return nil, false
			}
		}
	}
	for i := range descs {
		if d := &descs[i]; s.jsonCols[id][d.name] && d.kind == gomysql.MYSQL_TYPE_BLOB && !d.binary {
			d.kind, d.charset = gomysql.MYSQL_TYPE_JSON, ""
		}
	}
	t = s.tableFor(id, descs)
	if prev != nil && t == prev.table {
		return nil, true
	}
	s.latest[id] = &shape{table: t, descs: descs, captured: true}
	return t, true
}

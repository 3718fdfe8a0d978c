package mysql

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// XA transactions. XA PREPARE writes the transaction's rows to the binlog
// as an event group of their own (MariaDB: a GTID event flagged
// prepared-XA, the rows, `XA END`, an XA_PREPARE_LOG_EVENT; MySQL: `XA
// START` first), long before — or instead of — its outcome, which is a
// later group of its own holding one `XA COMMIT xid` or `XA ROLLBACK xid`.
// A one-phase `XA COMMIT … ONE PHASE` is an ordinary transaction.
//
// The decoder keeps a prepared group's rows aside under its xid and hands
// them over only at its XA COMMIT, versioned at the commit's own place in
// the binlog: changes are captured in commit order, like every other
// transaction's, and a rolled-back XA yields nothing. While any prepared
// XA is open no position is handed over (Invariant 1 and 2): a
// checkpoint past the prepare would lose its rows on a restart, since the
// stream resumes after the checkpoint and would see only the XA COMMIT.
// Starting from the last position before the prepare reads it again (and
// re-sends what followed it, which sinks ignore by version, Invariant 4).
//
// An XA COMMIT whose prepare lies before the stream's first position (an
// XA prepared while the initial snapshot was taken, or before a
// checkpoint of an older sluice) has no rows to hand over: it becomes a
// dead letter naming the xid, so the loss is visible (Invariant 7).

// flPreparedXA marks a MariaDB GTID event that starts an XA PREPARE group.
const flPreparedXA = 64

type xaTxn struct {
	recs []pipeline.Record
	dead []pipeline.DeadLetter
}

// xaQuery recognises XA statements: the verb, and the xid in the form the
// server logs it (X'gtrid',X'bqual',formatID).
var xaQuery = regexp.MustCompile(`(?i)^XA\s+(START|BEGIN|END|PREPARE|COMMIT|ROLLBACK)\b\s*(X'[0-9a-f]*'\s*,\s*X'[0-9a-f]*'\s*,\s*\d+)?\s*(ONE\s+PHASE)?`)

// xaKey normalises a logged xid.
func xaKey(logged string) string {
	return strings.ToLower(strings.Join(strings.Fields(strings.ReplaceAll(logged, ",", " , ")), ""))
}

// xaPrepareKey reads the xid of an XA_PREPARE_LOG_EVENT body: one-phase
// flag (1 byte), formatID, gtrid length, bqual length (4 bytes each,
// little-endian), then gtrid and bqual.
func xaPrepareKey(data []byte) (string, error) {
	if len(data) < 13 {
		return "", fmt.Errorf("XA_PREPARE event of %d bytes", len(data))
	}
	format := int32(binary.LittleEndian.Uint32(data[1:]))
	gl, bl := int(binary.LittleEndian.Uint32(data[5:])), int(binary.LittleEndian.Uint32(data[9:]))
	if gl < 0 || bl < 0 || 13+gl+bl > len(data) {
		return "", fmt.Errorf("XA_PREPARE event: xid lengths %d+%d past its %d bytes", gl, bl, len(data))
	}
	g, b := data[13:13+gl], data[13+gl:13+gl+bl]
	return xaKey(fmt.Sprintf("X'%s',X'%s',%d", hex.EncodeToString(g), hex.EncodeToString(b), format)), nil
}

// xaStatement handles an XA query event; handled is false for any other
// statement.
func (d *decoder) xaStatement(h *replication.EventHeader, e *replication.QueryEvent, sql string, emit func(txItem) error) (handled bool, err error) {
	m := xaQuery.FindStringSubmatch(sql)
	if m == nil {
		return false, nil
	}
	verb, xid, onePhase := strings.ToUpper(m[1]), xaKey(m[2]), m[3] != ""
	switch {
	case verb == "START" || verb == "BEGIN":
		d.xa, d.inTx = true, true
		return true, nil
	case verb == "END" || verb == "PREPARE":
		return true, nil // the group ends at the XA_PREPARE event
	case d.xa && verb == "COMMIT" && onePhase:
		d.xa = false
		return true, d.commit(h, e.GSet, emit)
	case verb == "COMMIT":
		if p, ok := d.prepared[xid]; ok {
			delete(d.prepared, xid)
			for i := range p.recs {
				r := p.recs[i]
				r.Version = streamVersion(d.epoch, d.txFile, d.txStart, d.nrows)
				r.EventTime, r.TxID = d.txTime, d.txID
				d.nrows++
				d.recs = append(d.recs, r)
			}
			d.dead = append(d.dead, p.dead...)
		} else {
			d.dead = append(d.dead, pipeline.DeadLetter{Error: fmt.Sprintf(
				"XA transaction %s was committed at %s:%d, but it was prepared before the stream's first position "+
					"(during the initial snapshot, or before the checkpoint): its changes are not in the stream; re-snapshot the tables it changed",
				m[2], d.file, h.LogPos), Raw: []byte(sql)})
		}
		return true, d.commit(h, e.GSet, emit)
	case verb == "ROLLBACK":
		delete(d.prepared, xid)
		return true, d.commit(h, e.GSet, emit)
	}
	return true, nil
}

// xaPrepared ends an XA PREPARE group at its XA_PREPARE event: its rows
// wait for the XA COMMIT, and nothing is handed over.
func (d *decoder) xaPrepared(data []byte) error {
	if !d.open {
		return nil // the tail of a group that began before our start
	}
	key, err := xaPrepareKey(data)
	if err != nil {
		return fmt.Errorf("mysql source: %w", err)
	}
	if d.prepared == nil {
		d.prepared = map[string]*xaTxn{}
	}
	d.prepared[key] = &xaTxn{recs: d.takeRecords(), dead: append([]pipeline.DeadLetter(nil), d.dead...)}
	if n := len(d.prepared[key].recs); n > 100000 {
		d.log.Warn("a prepared XA transaction's rows are held in memory until its XA COMMIT", zap.String("xid", key), zap.Int("rows", n))
	}
	d.open, d.inTx, d.xa = false, false, false
	d.recs, d.dead = d.recs[:0], d.dead[:0]
	d.handed.rows = 0
	return nil
}

package mysql

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
)

// positionMarks are the watermarks of a read-only incremental snapshot
// (Options.ReadOnlySnapshot), for a replica or a user who may write
// nothing. Instead of committing a row, ChunkReader.Mark registers the
// watermark here and the stream hands it over between two transactions
// (decoder.dueMarks), where a written watermark committed at that point
// of the binlog would have stood. The window stays sound (Invariant 12)
// because of where each one is placed (ChunkReader.readOnlyMark):
//   - a low watermark goes out at once, wherever the stream is, and Mark
//     returns only once a consistent read sees every transaction before
//     that point: every change the stream shows before it is in the chunk;
//   - a high watermark waits for a GTID position read after the chunk,
//     which contains every transaction the chunk saw: every change the
//     chunk holds came before it. A later point only widens the window.
//
// GTIDs, not file offsets, name the positions, so a watermark registered
// on one server is still met after the stream fails over to another that
// replicates the same transactions.
type positionMarks struct {
	mu   sync.Mutex
	list []positionMark
	// wake interrupts the stream's wait for its next event when a mark
	// is registered, so that an idle stream hands it over at once.
	wake   context.CancelFunc
	parent context.Context
	wctx   context.Context
	// added is set by add and cleared by waitContext: a mark added after
	// the stream looked for due marks but before it took its next wait
	// context (whose wake add could not call yet) makes that wait end at
	// once, not at the next event.
	added bool
}

type positionMark struct {
	token string
	at    gomysql.GTIDSet // nil: the stream's next point between transactions
	fired chan string     // receives the GTID set the stream had reached; buffered
}

// add registers a watermark holding token at the GTID position at (nil:
// at once), and wakes the stream. The returned channel receives the
// stream's GTID set where the watermark went out.
func (m *positionMarks) add(token string, at gomysql.GTIDSet) <-chan string {
	fired := make(chan string, 1)
	m.mu.Lock()
	m.list = append(m.list, positionMark{token: token, at: at, fired: fired})
	m.added = true
	wake := m.wake
	m.mu.Unlock()
	if wake != nil {
		wake()
	}
	return fired
}

// waiting reports whether a mark is registered.
func (m *positionMarks) waiting() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.list) > 0
}

// due removes and returns, in the order they were registered, the marks
// due at reached.
func (m *positionMarks) due(reached gomysql.GTIDSet) []positionMark {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []positionMark
	keep := m.list[:0]
	for _, pm := range m.list {
		if pm.at == nil || reached.Contain(pm.at) {
			out = append(out, pm)
		} else {
			keep = append(keep, pm)
		}
	}
	clear(m.list[len(keep):])
	m.list = keep
	return out
}

// waitContext returns a context under parent that add cancels: the stream
// waits for its next event with it. One context serves every wait until
// a mark is added; after one was added it is returned cancelled once.
func (m *positionMarks) waitContext(parent context.Context) context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.added || m.wctx == nil || m.wctx.Err() != nil || m.parent != parent {
		m.wctx, m.wake = context.WithCancel(parent)
		m.parent = parent
		if m.added {
			m.wake()
		}
		m.added = false
	}
	return m.wctx
}

// dueMarks hands over, as OpWatermark records right after the last
// commit, the registered watermarks the stream has reached. It runs
// between transactions only. Each is versioned at the end of that commit
// with the snapshot rows' index: above every row of the transactions
// before it and below every row of the next, which starts at or after
// that offset (docs/versions.md).
func (d *decoder) dueMarks(emit func(txItem) error) error {
	if d.pend == nil || d.open || d.foreign || d.reached.File == "" || !d.pend.waiting() {
		return nil
	}
	set, err := d.reached.gtidSet()
	if err != nil {
		return err
	}
	due := d.pend.due(set)
	if len(due) == 0 {
		return nil
	}
	file, err := fileNumber(d.reached.File)
	if err != nil {
		return err
	}
	at := d.reached
	at.Epoch = d.epoch
	it := txItem{pos: at.Encode(), at: at, commitTime: d.txTime}
	if d.holdsPositions() {
		it.pos, it.at = nil, Position{}
	}
	v := pipeline.Version{d.epoch, file, uint64(d.reached.Pos), snapshotRow}
	for _, pm := range due {
		it.records = append(it.records, pipeline.Record{Op: pipeline.OpWatermark, After: []any{pm.token}, EventTime: d.txTime,
			Version: v, Pos: it.pos})
	}
	if err := emit(it); err != nil {
		return err
	}
	for _, pm := range due {
		pm.fired <- d.reached.GTID
	}
	return nil
}

// readOnlyMark is Mark for a read-only snapshot (positionMarks).
//
// A low watermark goes out at the stream's next point between
// transactions; Mark then waits until a consistent read sees every
// transaction up to that point (visible).
//
// A high watermark waits for the position a read taken now starts from:
// on MariaDB the binlog position of a consistent snapshot
// (binlog_snapshot_file/position, taken atomically with it), as a GTID
// position; on MySQL, which has no such status, @@GLOBAL.gtid_executed,
// the position Debezium's read-only snapshot uses. With high, the table's
// shape is read first, under the metadata lock a SELECT of it takes and
// holds until the position is read: no schema change of the table can
// commit between the two.
func (r *ChunkReader) readOnlyMark(ctx context.Context, c *client.Conn, token string, table pipeline.TableID, high func(*pipeline.Table) error) error {
	if high == nil {
		var reached string
		select {
		case reached = <-r.s.posMarks.add(token, nil):
		case <-ctx.Done():
			return ctx.Err()
		}
		return r.visible(ctx, c, reached)
	}
	at, err := r.readPosition(c, func() error { return r.highShape(c, table, high) })
	if err != nil {
		return err
	}
	r.s.posMarks.add(token, at)
	return nil
}

// visible returns once a consistent read sees every transaction of the
// GTID set reached: the stream reads a transaction from the binlog, and
// the server may make it visible a moment later.
func (r *ChunkReader) visible(ctx context.Context, c *client.Conn, reached string) error {
	want, err := gomysql.ParseGTIDSet(r.s.flavor, reached)
	if err != nil {
		return fmt.Errorf("mysql source: the stream's position %q: %w", reached, err)
	}
	wait := time.Millisecond
	for {
		at, err := r.readPosition(c, nil)
		if err != nil {
			return err
		}
		if at.Contain(want) {
			return nil
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// readPosition reads, in a transaction of its own, the GTID position a
// consistent read taken now starts from (MariaDB) or the executed set
// (MySQL); inside, before the position, it runs also (nil: nothing).
func (r *ChunkReader) readPosition(c *client.Conn, also func() error) (gomysql.GTIDSet, error) {
	begin := "START TRANSACTION READ ONLY"
	if r.s.flavor == FlavorMariaDB {
		begin = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"
	}
	if _, err := c.Execute(begin); err != nil {
		return nil, err
	}
	if also != nil {
		if err := also(); err != nil {
			return nil, err
		}
	}
	text, err := r.snapshotGTID(c)
	if err != nil {
		return nil, err
	}
	if _, err := c.Execute("COMMIT"); err != nil {
		return nil, err
	}
	set, err := gomysql.ParseGTIDSet(r.s.flavor, text)
	if err != nil {
		return nil, fmt.Errorf("mysql source: the server's position %q: %w", text, err)
	}
	return set, nil
}

// snapshotGTID reads the GTID position of the open transaction's
// consistent snapshot (MariaDB) or the executed set (MySQL).
func (r *ChunkReader) snapshotGTID(c *client.Conn) (string, error) {
	if r.s.flavor != FlavorMariaDB {
		res, err := c.Execute("SELECT @@GLOBAL.gtid_executed")
		if err != nil {
			return "", fmt.Errorf("mysql source: read gtid_executed: %w", err)
		}
		defer res.Close()
		return getString(res, 0, 0)
	}
	res, err := c.Execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return "", fmt.Errorf("mysql source: read the snapshot's binlog position: %w", err)
	}
	var file string
	var pos uint64
	for i := range res.Values {
		name, _ := getString(res, i, 0)
		switch name {
		case "Binlog_snapshot_file":
			file, _ = getString(res, i, 1)
		case "Binlog_snapshot_position":
			pos, _ = res.GetUint(i, 1)
		}
	}
	res.Close()
	if file == "" {
		return "", errors.New("mysql source: the server reports no binlog snapshot position: is log_bin on?")
	}
	g, err := c.Execute("SELECT IFNULL(BINLOG_GTID_POS(?, ?), '')", file, pos)
	if err != nil {
		return "", fmt.Errorf("mysql source: BINLOG_GTID_POS(%s, %d): %w", file, pos, err)
	}
	defer g.Close()
	return getString(g, 0, 0)
}

package mysql

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// snapshotLoad is the consistent initial load. Each of N reader
// connections opens one transaction WITH CONSISTENT SNAPSHOT and reads
// primary-key ranges of the tables in it.
//
//   - MariaDB takes no lock: each reader reads binlog_snapshot_file and
//     binlog_snapshot_position, the binlog offset its snapshot sees exactly.
//   - MySQL cannot tell a snapshot's offset, so FLUSH TABLES WITH READ LOCK
//     is held only while the readers start and the binlog position and
//     executed GTID set are read; then every reader has the same snapshot.
//
// A reader's rows get version {epoch, file, offset, 1} at its own snapshot
// offset; the stream starts at the smallest of them (Invariant 3), where
// every transaction sorts above the rows read after it committed (row
// indexes from rowBase), and a change that a later reader already saw
// sorts below that reader's rows, so the sink keeps the newer state
// (Invariant 4). Each table's rows are preceded by a truncate barrier at
// the stream start, which clears what an interrupted earlier load left.
//
// Batches carry no position of their own, but the source tells what a
// restart would still have to read after each one it hands over
// (LoadState): the incremental snapshot engine positions them at the
// stream start with that progress, so a restart streams from there and
// reads only the key ranges not handed over, in chunks (snapshot.Loader).
// A schema change that fails a reader (ER_TABLE_DEF_CHANGED) is then
// survived too: the restart reads the rest in chunks, which a schema
// change only makes read again.
//
// The readers' transactions hold a metadata lock on every table they read
// until the load ends, so a schema change of such a table waits for them,
// and every statement on the table queues behind it. Should the walk or a
// reader then need the table (a later range, a table not read yet), it
// would wait for the schema change, which waits for the readers: the
// load's connections wait lockWaitSeconds for a metadata lock. A load
// that stands still issues no statement, so a watcher gives way to a
// session waiting as long (giveway.go). The load closes its connections
// as soon as its readers are done, failed or not, so the schema change
// goes on, and the restart reads the rest in chunks.
type snapshotLoad struct {
	s       *Source
	server  string
	control *client.Conn
	readers []*snapReader
	start   Position
	tables  []*loadTable
	startAt time.Time

	out       chan loadItem
	errMu     sync.Mutex
	err       error
	closeOnce sync.Once

	// handedMu guards what Read handed over: loadTable.started, handed
	// and the ranges' progress.
	handedMu sync.Mutex
}

type snapReader struct {
	c        *client.Conn
	fileName string
	file     uint64
	pos      uint32
}

type loadTable struct {
	name   tableName
	table  *pipeline.Table
	descs  []colDesc
	keys   keyset
	cols   string // the quoted select list
	done   atomic.Int64
	total  int64
	gDone  prometheus.Gauge
	gTotal prometheus.Gauge

	started bool // its barrier was handed over
	ranges  []*snapshot.RangeProgress
	tail    *snapshot.RangeProgress // the range above the walk's last boundary
	handed  int64
}

// loadItem is a batch of the load with what it completes.
type loadItem struct {
	b        pipeline.Batch
	barriers bool                    // b holds every table's truncate barrier
	t        *loadTable              // the table of b's rows
	rng      *snapshot.RangeProgress // their range
	last     snapshot.Cursor         // the key of b's last row
	final    bool                    // b ends rng
}

// loadJob is one primary-key range: after lo (nil: from the start) up to
// and including hi (nil: to the end).
type loadJob struct {
	t      *loadTable
	lo, hi []any
	rng    *snapshot.RangeProgress
}

func newSnapshotLoad(s *Source, server string) *snapshotLoad {
	return &snapshotLoad{s: s, server: server, out: make(chan loadItem, 4)}
}

// begin opens the reader transactions, fixes the stream's start position
// and describes the tables (plan); run walks their keys.
func (l *snapshotLoad) begin(ctx context.Context) (err error) {
	s := l.s
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	l.startAt = time.Now()
	if l.control, err = s.connect(ctx); err != nil {
		return err
	}
	mysql := !s.srv.MariaDB
	if mysql {
		if _, err := l.control.Execute("FLUSH TABLES WITH READ LOCK"); err != nil {
			return fmt.Errorf("mysql source: FLUSH TABLES WITH READ LOCK for the snapshot: %w (it needs RELOAD: GRANT RELOAD ON *.* TO the user; "+
				"or set snapshot.mode: never)", err)
		}
	}
	for i := 0; i < s.opts.Snapshot.Parallel; i++ {
		r, err := l.openReader(ctx)
		if err != nil {
			return err
		}
		l.readers = append(l.readers, r)
	}
	if mysql {
		p, err := currentPosition(l.control, s.srv)
		if err != nil {
			return err
		}
		if _, err := l.control.Execute("UNLOCK TABLES"); err != nil {
			return fmt.Errorf("mysql source: UNLOCK TABLES: %w", err)
		}
		n, err := fileNumber(p.File)
		if err != nil {
			return err
		}
		for _, r := range l.readers {
			r.file, r.pos = n, p.Pos
		}
		l.start = p
	} else {
		first := l.readers[0]
		for _, r := range l.readers[1:] {
			if r.file < first.file || r.file == first.file && r.pos < first.pos {
				first = r
			}
		}
		file := first.fileName
		res, err := l.control.Execute("SELECT IFNULL(BINLOG_GTID_POS(?, ?), '')", file, first.pos)
		if err != nil {
			return fmt.Errorf("mysql source: BINLOG_GTID_POS(%s, %d): %w", file, first.pos, err)
		}
		gtid, _ := getString(res, 0, 0)
		res.Close()
		l.start = Position{Flavor: FlavorMariaDB, GTID: gtid, File: file, Pos: first.pos}
	}
	l.start.Server, l.start.Epoch = l.server, l.s.epochFresh()
	// After FLUSH TABLES WITH READ LOCK, which may wait as long as the
	// server lets it: the walk waits for a table's lock as briefly as the
	// readers.
	if _, err := l.control.Execute(lockWait); err != nil {
		return fmt.Errorf("mysql source: snapshot control connection: %s: %w", lockWait, err)
	}
	if err := l.start.Validate(); err != nil {
		return fmt.Errorf("mysql source: snapshot position: %w", err)
	}
	return l.plan(ctx)
}

// openReader starts one snapshot transaction.
func (l *snapshotLoad) openReader(ctx context.Context) (*snapReader, error) {
	c, err := l.s.connect(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range []string{"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ", lockWait,
		"START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"} {
		if _, err := c.Execute(q); err != nil {
			c.Close()
			return nil, fmt.Errorf("mysql source: snapshot reader: %s: %w", q, err)
		}
	}
	r := &snapReader{c: c}
	if !l.s.srv.MariaDB {
		return r, nil
	}
	res, err := c.Execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("mysql source: read binlog_snapshot_file/position: %w", err)
	}
	defer res.Close()
	var file string
	for i := range res.Values {
		name, _ := getString(res, i, 0)
		val, _ := getString(res, i, 1)
		switch strings.ToLower(name) {
		case "binlog_snapshot_file":
			file = val
		case "binlog_snapshot_position":
			fmt.Sscan(val, &r.pos)
		}
	}
	if r.file, err = fileNumber(file); err != nil {
		c.Close()
		return nil, fmt.Errorf("mysql source: snapshot reader: %w", err)
	}
	r.fileName = file
	return r, nil
}

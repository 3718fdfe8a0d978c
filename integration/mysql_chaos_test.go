package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/snapshot"
	"github.com/sluice-cdc/sluice/sources/mysql"
)

const mysqlChaosSchema = `CREATE TABLE items (
  id    BIGINT UNSIGNED PRIMARY KEY,
  name  VARCHAR(100) NOT NULL,
  qty   INT,
  price DECIMAL(12,3),
  ratio DOUBLE,
  at    DATETIME(6),
  day   DATE,
  flag  TINYINT,
  m     ENUM('sad','ok','happy'),
  tags  SET('a','b','c'),
  blob_ VARBINARY(32)
);
CREATE TABLE events (
  a       INT,
  b       VARCHAR(20),
  payload TEXT,
  n       BIGINT,
  PRIMARY KEY (a, b)
);
INSERT INTO items SELECT seq, CONCAT('item ', seq), seq % 1000, (seq % 9973) / 7, seq / 3,
  TIMESTAMPADD(MINUTE, seq, '2024-01-01 00:00:00'), DATE_ADD('2020-01-01', INTERVAL seq % 2000 DAY), seq % 2,
  ELT(1 + seq % 3, 'sad', 'ok', 'happy'), ELT(1 + seq % 3, 'a', 'a,b', ''), UNHEX(MD5(seq))
  FROM seq_1_to_ITEMS;
INSERT INTO events SELECT seq % 500, CONCAT('k', seq DIV 500), REPEAT('p', seq % 50), seq FROM seq_1_to_EVENTS;`

// mysqlAdded are the columns the MariaDB chaos workload adds to items as
// it goes, one every chaosAlterEvery transactions: the rows that existed
// before each ALTER hold its DEFAULT with no row event saying so, which
// only the statement tells the source (or, for the last, only a new read
// of the table).
var mysqlAdded = []string{
	`c_int INT DEFAULT -42`,
	`c_dt DATETIME(6) DEFAULT '2024-02-29 12:34:56.789012'`,
	`c_txt VARCHAR(20) DEFAULT 'it''s \\ here'`,
	`c_dec DECIMAL(20,5) DEFAULT '-123.45'`,
	`c_u BIGINT UNSIGNED DEFAULT 18446744073709551615`,
	`c_day DATE DEFAULT '1000-01-01'`,
	`c_enum ENUM('x','y') DEFAULT 'y'`,
	`c_dbl DOUBLE DEFAULT 1e-300`,
	// An expression DEFAULT: a value per row that no statement spells;
	// the ALTER queues the table to be read again.
	`c_uuid VARCHAR(36) DEFAULT (UUID())`,
}

// mysqlRenames come after mysqlAdded, once the initial load is over
// (chaosCounts.streaming): a column renamed moves every row's value to a
// column no sink held a value of, with no row event; only the re-read the
// ALTER queues brings the sinks along. The workload never writes ratio.
var mysqlRenames = []string{`ALTER TABLE items RENAME COLUMN ratio TO ratio_renamed`}

// mysqlWorkload keeps writing small transactions until ctx ends, counting
// them into c, a third of them with binlog_row_image=MINIMAL; while ddl holds, also an ALTER TABLE items ADD COLUMN …
// DEFAULT (each of added in turn) every chaosAlterEvery transactions and
// a TRUNCATE events every chaosTruncateEvery. perSecond > 0 paces it to
// that many transactions a second.
func mysqlWorkload(ctx context.Context, addr, db string, maxID int64, c *chaosCounts, ddl *atomic.Bool, added []string, perSecond int) error {
	full, err := client.Connect(addr, "root", "", db)
	if err != nil {
		return err
	}
	defer full.Close()
	// A third of the transactions come from a session that writes partial
	// row images (Invariant 13): its inserts leave the columns they do not
	// set out, its updates the columns they do not change.
	minimal, err := client.Connect(addr, "root", "", db)
	if err != nil {
		return err
	}
	defer minimal.Close()
	if _, err := minimal.Execute("SET SESSION binlog_row_image = 'MINIMAL'"); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(7, 11))
	next := maxID
	var pace <-chan time.Time
	if perSecond > 0 {
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		pace = tick.C
	}
	for op := 1; ctx.Err() == nil; op++ {
		if !c.next(ctx, pace) {
			return nil
		}
		id := 1 + rng.Int64N(next)
		var stmts []string
		alter, truncate := false, false
		switch n := rng.IntN(12); {
		case ddl.Load() && op%chaosAlterEvery == 0 && c.runsNow(added, int(c.alters.Load())):
			stmt := added[c.alters.Load()]
			if !strings.HasPrefix(stmt, "ALTER ") {
				stmt = `ALTER TABLE items ADD COLUMN ` + stmt
			}
			stmts, alter = []string{stmt}, true
		case ddl.Load() && op%chaosTruncateEvery == 0:
			stmts, truncate = []string{`TRUNCATE events`}, true
		case n < 3:
			next++
			stmts = []string{fmt.Sprintf(`INSERT INTO items (id, name, qty, price, at, flag, m, tags)
				VALUES (%d, 'new %d', %d, %d.125, NOW(6), 1, 'happy', 'c')`, next, next, rng.IntN(100), rng.IntN(1000))}
		case n < 7:
			stmts = []string{fmt.Sprintf(`UPDATE items SET qty = IFNULL(qty, 0) + 1, price = price + 0.001, m = 'ok', tags = 'b,c' WHERE id = %d`, id)}
		case n < 8:
			stmts = []string{fmt.Sprintf(`DELETE FROM items WHERE id = %d`, id)}
		case n < 9:
			// A primary-key update.
			next++
			stmts = []string{fmt.Sprintf(`UPDATE items SET id = %d WHERE id = %d`, next, id)}
		case n < 10:
			stmts = []string{fmt.Sprintf(`INSERT INTO events VALUES (%d, 'w%d', 'w', %d) ON DUPLICATE KEY UPDATE n = n + 1, payload = CONCAT(payload, 'x')`,
				rng.IntN(600), rng.IntN(50), rng.Int64())}
		default:
			// A multi-statement transaction across both tables.
			a := rng.IntN(500)
			stmts = []string{"BEGIN", fmt.Sprintf(`UPDATE items SET name = CONCAT(name, '+') WHERE id BETWEEN %d AND %d`, id, id+20),
				fmt.Sprintf(`DELETE FROM events WHERE a = %d ORDER BY b LIMIT 1`, a), "COMMIT"}
		}
		conn := full
		if rng.IntN(3) == 0 {
			conn = minimal
		}
		for _, q := range stmts {
			if _, err := conn.Execute(q); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		switch {
		case alter:
			c.alters.Add(1)
		case truncate:
			c.truncates.Add(1)
		}
		c.writes.Add(1)
	}
	return nil
}

// next waits for the workload's next transaction: pace's next tick (nil:
// unpaced), then for as long as c.hold is set, with c.held set meanwhile.
// It reports false once ctx is done.
func (c *chaosCounts) next(ctx context.Context, pace <-chan time.Time) bool {
	tick := func(pace <-chan time.Time) bool {
		select {
		case <-pace:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if pace != nil && !tick(pace) {
		return false
	}
	for c.hold.Load() {
		c.held.Store(true)
		if pace == nil {
			pace = time.Tick(time.Millisecond) // unpaced: poll the flag
		}
		if !tick(pace) {
			return false
		}
	}
	c.held.Store(false)
	return true
}

// checkpointGTID reads the GTID position of the pipeline's checkpoint file
// ("" when there is none yet).
func checkpointGTID(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Checkpoint pipeline.Checkpoint `json:"checkpoint"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return "" // a torn read of a file being replaced; the next poll sees the new one
	}
	p, err := mysql.ParsePosition(snapshot.StreamPosition(pipeline.Position(env.Checkpoint.Position)))
	if err != nil {
		t.Fatal(err)
	}
	return p.GTID
}

// gtidSeq is the sequence number of a single-domain MariaDB GTID position.
func gtidSeq(t *testing.T, gtid string) uint64 {
	t.Helper()
	set, err := gomysql.ParseMariadbGTIDSet(gtid)
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for _, g := range set.(*gomysql.MariadbGTIDSet).Sets {
		seq = max(seq, g.SequenceNumber)
	}
	return seq
}

// waitCheckpointAt polls until the checkpoint of the running daemon d holds
// the single-domain MariaDB GTID mark.
func waitCheckpointAt(t *testing.T, d *daemonProc, checkpoint, mark string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for g := checkpointGTID(t, checkpoint); g == "" || gtidSeq(t, g) < gtidSeq(t, mark); g = checkpointGTID(t, checkpoint) {
		select {
		case <-d.done:
			t.Fatalf("daemon exited (%d) before checkpointing %s:\n%s", d.exitCode(), mark, d.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint never reached %s:\n%s", mark, d.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertSinkEqualsMySQL compares a captured table row by row with the
// DuckDB sink.
func assertSinkEqualsMySQL(t *testing.T, ctx context.Context, opts mysql.Options, duck, db, table string) int {
	t.Helper()
	shape, rows, err := mysql.TableRows(ctx, opts, db, table)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]any{}
	for _, r := range rows {
		want[sinktest.RowKey(shape, r)] = r
	}
	got := duckRows(t, ctx, duck, shape)
	if diff := sinktest.Diff(shape, want, got); diff != "" {
		t.Fatalf("%s.%s: DuckDB differs from MariaDB:\n%s", db, table, diff)
	}
	return len(want)
}

// harness.Trials(8) kill -9 of the real binary at random moments — during
// the initial load (each restart reads the rest of it in chunks) and
// during the stream — under a concurrent write
// workload that also adds columns with DEFAULTs and truncates; the DuckDB
// copy then equals MariaDB row by row. Ranges of 3,000 rows make the
// load's key walk (which queues ranges as it finds them) run beside the
// reads, so kills land mid-walk too.
func TestKill9DuringLoadAndStreamMariaDB(t *testing.T) {
	// Schema changes start once the initial load is over: a
	// consistent-snapshot read of a table that a TRUNCATE or an ALTER
	// changed after the snapshot fails on MariaDB ("Table definition has
	// changed"), which stops the load (the next start would read the rest
	// in chunks, but this test's kills are its only restarts); the test
	// below runs them inside chunk windows.
	runMariaDBChaos(t, mariadbChaos{name: "chaos", items: 300000, events: 30000, snapshot: "{parallel: 2, chunk_rows: 3000}", perSecond: 400,
		loaded: loadedAll})
}

// snapshot.mode incremental under kill -9: harness.Trials(8) kills at
// random moments, half while the tables are read in chunks (each run
// resumes from the chunks its checkpoint covers), under the concurrent
// workload above paced to 400 transactions a second, with its ALTERs and
// TRUNCATEs running from the start, inside chunk windows. DuckDB then
// equals MariaDB row by row, and sluice verify finds the sink equal. The
// table grows with the kills (60,000 rows for 8), so that half of them
// still land while it is read.
func TestKill9DuringIncrementalSnapshotMariaDB(t *testing.T) {
	runMariaDBChaos(t, mariadbChaos{name: "inchaos", items: 7500 * harness.Trials(8), events: 20000, perSecond: 400, ddlFromStart: true,
		snapshot: "{mode: incremental, parallel: 2, chunk_time: 50ms, max_chunk_rows: 500}",
		loaded:   loadedAll})
}

// mariadbChaos is one kill -9 run against MariaDB.
type mariadbChaos struct {
	name          string // the database, and the pipeline's name
	items, events int    // rows before the first start
	perSecond     int    // workload pace; 0 unpaced
	snapshot      string // the source's snapshot block
	// ddlFromStart runs the workload's ALTERs and TRUNCATEs from the
	// first start; otherwise only once loaded.
	ddlFromStart bool
	// loaded reports whether the table copy is over, from the checkpoint
	// file: kills before it count as load kills.
	loaded func(t *testing.T, checkpoint string) bool
}

// runMariaDBChaos runs c: the workload from before the first start,
// killAtRandom, a final run that sees at least 3 ALTERs and a TRUNCATE
// and checkpoints a last transaction, then DuckDB compared row by row and
// sluice verify.
func runMariaDBChaos(t *testing.T, c mariadbChaos) {
	m := harness.MariaDBT(t)
	ctx := context.Background()
	if err := m.CreateDatabase(ctx, c.name); err != nil {
		t.Fatal(err)
	}
	if err := m.Exec(ctx, c.name, strings.Split(strings.NewReplacer("ITEMS", fmt.Sprint(c.items), "EVENTS", fmt.Sprint(c.events)).Replace(mysqlChaosSchema), ";\n")...); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	dsn := "mysql://root@" + addr
	dir := t.TempDir()
	cfg := filepath.Join(dir, "my.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: my%[1]s
source:
  mysql:
    dsn: %[2]s
    tables: [%[1]s.items, %[1]s.events]
    heartbeat_interval: 1s
    status_interval: 1s
    snapshot: %[3]s
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms}
`, c.name, dsn, c.snapshot)), 0o644); err != nil {
		t.Fatal(err)
	}
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var work chaosCounts
	var ddl atomic.Bool
	ddl.Store(c.ddlFromStart)
	workErr := make(chan error, 1)
	all := append(slices.Clone(mysqlAdded), mysqlRenames...)
	go func() { workErr <- mysqlWorkload(wctx, addr, c.name, int64(c.items), &work, &ddl, all, c.perSecond) }()

	loadKills, streamKills := killAtRandom(t, cfg, checkpoint, func() bool {
		loaded := c.loaded(t, checkpoint)
		if loaded {
			ddl.Store(true)
			work.streaming.Store(true)
		}
		return loaded
	})
	t.Logf("%d kills during the load, %d during the stream, %d workload transactions so far", loadKills, streamKills, work.writes.Load())

	// Final run: stop the workload, wait until the checkpoint holds the
	// last transaction (it commits only what DuckDB holds), then stop.
	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	time.Sleep(500 * time.Millisecond) // some live traffic on the final run too
	waitSnapshotsOver(t, d, checkpoint)
	ddl.Store(true)
	work.streaming.Store(true)
	work.waitDDL(t, d, int64(len(all)))
	stopWork()
	if err := <-workErr; err != nil {
		t.Fatalf("workload: %v", err)
	}
	mark, err := m.Query(ctx, "", "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	waitCheckpointAt(t, d, checkpoint, mark)
	waitSnapshotsOver(t, d, checkpoint)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("final run exit %d:\n%s", code, d.logs())
	}
	if a := work.alters.Load(); a < 3 || work.truncates.Load() < 1 {
		t.Fatalf("the workload ran %d ALTERs and %d TRUNCATEs in %d transactions: too few to test schema changes under kills",
			a, work.truncates.Load(), work.writes.Load())
	}
	duck := filepath.Join(dir, "sink.duckdb")
	opts := mysql.Options{Pipeline: "verify", DSN: dsn}
	n1 := assertSinkEqualsMySQL(t, ctx, opts, duck, c.name, "items")
	n2 := assertSinkEqualsMySQL(t, ctx, opts, duck, c.name, "events")
	expectVerifyEqual(t, cfg)
	t.Logf("items: %d rows, events: %d rows equal after %d kills, %d transactions, %d ALTERs (columns added with a DEFAULT, renames), %d truncates",
		n1, n2, loadKills+streamKills, work.writes.Load(), work.alters.Load(), work.truncates.Load())
}

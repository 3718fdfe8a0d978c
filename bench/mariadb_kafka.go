package bench

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sources/mysql"
)

// mariaTable is workload (a)'s six-column table on MariaDB.
const mariaTable = "CREATE TABLE bench.t (id BIGINT PRIMARY KEY, n INT, label VARCHAR(64), at TIMESTAMP(6) NULL, amount DECIMAL(12,2), doc JSON)"

// mariaServer is a throwaway MariaDB (1 GiB buffer pool, so the snapshot
// reference and sluice both read from memory) with the workload's table.
type mariaServer struct {
	m    *harness.MariaDB
	c    *client.Conn
	addr string
}

func startMaria(ctx context.Context, o RunOptions) (*mariaServer, error) {
	m, err := harness.StartMariaDB(ctx, harness.MariaDBOptions{Settings: map[string]string{"innodb_buffer_pool_size": "1G"}})
	if err != nil {
		return nil, err
	}
	s := &mariaServer{m: m, addr: net.JoinHostPort(m.Host, strconv.Itoa(m.Port))}
	if s.c, err = client.Connect(s.addr, "root", "", ""); err != nil {
		s.stop()
		return nil, err
	}
	for _, q := range []string{"CREATE DATABASE bench", mariaTable} {
		if err := s.exec(q); err != nil {
			s.stop()
			return nil, err
		}
	}
	if v, err := one(s.c, "SELECT VERSION()"); err == nil {
		o.version("MariaDB", v)
	}
	return s, nil
}

func (s *mariaServer) stop() {
	if s.c != nil {
		s.c.Close()
	}
	_ = s.m.Stop()
}

func (s *mariaServer) exec(q string) error {
	if _, err := s.c.Execute(q); err != nil {
		return fmt.Errorf("%.80s: %w", q, err)
	}
	return nil
}

func (s *mariaServer) options(name string) mysql.Options {
	return mysql.Options{Pipeline: name, DSN: "mysql://root@" + s.addr, Tables: []string{"bench.t"}}
}

// insert implements latencyDB: one multi-row INSERT (autocommit).
func (s *mariaServer) insert(_ context.Context, first, n int) error {
	var sb strings.Builder
	sb.WriteString("INSERT INTO bench.t VALUES ")
	for i := first; i < first+n; i++ {
		if i > first {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `(%d,%d,'customer %08d with a forty-byte label',TIMESTAMPADD(SECOND,%d,'2024-01-01'),%d.%02d,'{"i":%d,"ok":true}')`,
			i, i%100000, i, i%100_000_000, i%10000000, i%100, i)
	}
	return s.exec(sb.String())
}

// streamFromNow implements latencyDB: from the server's current GTID
// position.
func (s *mariaServer) streamFromNow(_ context.Context, name string, heartbeat time.Duration) (pipeline.Source, []byte, error) {
	gtid, err := one(s.c, "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		return nil, nil, err
	}
	o := s.options(name)
	o.StartGTID, o.Snapshot.Mode = gtid, mysql.SnapshotNever
	src, err := mysql.New(o, nil, nil)
	return src, nil, err
}

func (s *mariaServer) connector() string { return "mysql" }

// MariaDBKafka is workload (a) on MariaDB into Kafka: N inserts, N updates
// and N/5 deletes in 1,000-row transactions, read from one binlog by, in
// order: mariadb-binlog --read-from-remote-server to /dev/null (the
// reference, again at the end; mean), sluice into the Kafka sink at the
// config defaults until the broker acknowledged every change, the Kafka
// ceiling (sluice's records produced again from memory), and Debezium
// (MariaDB connector, snapshot mode "never": the whole binlog of the fresh
// server, i.e. the same backlog).
type MariaDBKafka struct{}

// Name implements Scenario.
func (MariaDBKafka) Name() string { return "mariadb-kafka" }

// Run implements Scenario.
func (s MariaDBKafka) Run(o RunOptions) ([]Figure, error) {
	rows := o.Rows
	if rows <= 0 {
		rows = 1_000_000
	}
	rows -= rows % 5000
	if rows < 5000 {
		return nil, fmt.Errorf("%s: at least 5000 rows", s.Name())
	}
	tool, err := binlogTool(o)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	m, br, err := withBroker(ctx, o, func(o RunOptions) (*mariaServer, error) { return startMaria(ctx, o) })
	if err != nil {
		return nil, err
	}
	defer br.stop()
	defer m.stop()
	start, err := one(m.c, "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := writeWorkload(m.exec, rows); err != nil {
		return nil, err
	}
	write := time.Since(t0)
	changes := rows + rows + rows/5
	first, err := one(m.c, "SHOW BINARY LOGS")
	if err != nil {
		return nil, err
	}
	opts := m.options("bench")
	opts.StartGTID, opts.Snapshot.Mode = start, mysql.SnapshotNever
	src, err := mysql.New(opts, nil, nil)
	if err != nil {
		return nil, err
	}
	figs, err := comparison{
		changes: changes, ref: "mariadb-binlog", ratio: "sluice / mariadb-binlog", target: ">= 0.5",
		runRef: func(int) (time.Duration, error) { return binlogReference(tool, m.m, first) },
		sluice: kafkaRun{src: src, prefix: "bench", connector: "mysql", records: int64(changes), profile: o.Profile},
		topic:  "bench.bench.t", stored: int64(changes + rows/5),
		debezium: DebeziumOptions{Connector: "mariadb", Host: m.m.Host, Port: m.m.Port, User: "root",
			Database: "bench", Tables: []string{"bench.t"}, ServerID: 5401, SnapshotMode: "never",
			TopicPrefix: "dbz", Brokers: br.k.Brokers(), Records: changes},
		stream: true,
	}.run(ctx, o, br, s.Name())
	if err != nil {
		return nil, err
	}
	return append([]Figure{{Name: "MariaDB write", Unit: "rows/s", Value: float64(changes) / write.Seconds()}}, figs...), nil
}

// MariaDBSnapshot is workload (c) on MariaDB: N rows (default 5,000,000)
// read whole by the mariadb client (--quick --batch, SELECT * to
// /dev/null; before and after, mean), by sluice's snapshot (config
// defaults: 2 readers, 100,000-row key ranges) into Kafka, and by
// Debezium's initial snapshot into the same broker.
type MariaDBSnapshot struct{}

// Name implements Scenario.
func (MariaDBSnapshot) Name() string { return "mariadb-snapshot" }

// Run implements Scenario.
func (s MariaDBSnapshot) Run(o RunOptions) ([]Figure, error) {
	rows := o.Rows
	if rows <= 0 {
		rows = 5_000_000
	}
	ctx := context.Background()
	m, br, err := withBroker(ctx, o, func(o RunOptions) (*mariaServer, error) { return startMaria(ctx, o) })
	if err != nil {
		return nil, err
	}
	defer br.stop()
	defer m.stop()
	if err := m.fill(o, s.Name(), rows); err != nil {
		return nil, err
	}
	ref := func() (time.Duration, error) { return m.selectAll(ctx) }
	opts := m.options("snap")
	opts.Snapshot = mysql.SnapshotOptions{Mode: mysql.SnapshotInitial, Parallel: 2, ChunkRows: 100_000}
	src, err := mysql.New(opts, nil, nil)
	if err != nil {
		return nil, err
	}
	return comparison{
		changes: rows, ref: "mariadb SELECT *", ratio: "sluice / mariadb SELECT", target: ">= 0.5",
		runRef: func(int) (time.Duration, error) { return ref() },
		sluice: kafkaRun{src: src, prefix: "snap", connector: "mysql", records: int64(rows), profile: o.Profile},
		topic:  "snap.bench.t", stored: int64(rows),
		debezium: DebeziumOptions{Connector: "mariadb", Host: m.m.Host, Port: m.m.Port, User: "root",
			Database: "bench", Tables: []string{"bench.t"}, ServerID: 5402, SnapshotMode: "initial",
			TopicPrefix: "dbz", Brokers: br.k.Brokers(), Records: rows},
	}.run(ctx, o, br, s.Name())
}

// MariaDBLatency is workload (d) on MariaDB, as PGLatency.
type MariaDBLatency struct{}

// Name implements Scenario.
func (MariaDBLatency) Name() string { return "mariadb-latency" }

// Run implements Scenario.
func (MariaDBLatency) Run(o RunOptions) ([]Figure, error) {
	ctx := context.Background()
	m, br, err := withBroker(ctx, o, func(o RunOptions) (*mariaServer, error) { return startMaria(ctx, o) })
	if err != nil {
		return nil, err
	}
	defer br.stop()
	defer m.stop()
	yaml := fmt.Sprintf(`  mysql:
    dsn: mysql://root@%s
    tables: [bench.t]
    heartbeat_interval: 200ms
    snapshot:
      mode: never`, m.addr)
	return latencyScenario(ctx, o, m, br, yaml, "recover.bench.t")
}

// fill inserts rows rows of the six-column shape into bench.t.
func (s *mariaServer) fill(o RunOptions, scenario string, rows int) error {
	if err := s.c.UseDB("bench"); err != nil { // the seq_ tables live in the current database
		return err
	}
	t0 := time.Now()
	for lo := 0; lo < rows; lo += 250_000 {
		hi := min(lo+250_000, rows) - 1
		if err := s.exec(fmt.Sprintf(`INSERT INTO bench.t SELECT seq, seq %% 100000, CONCAT('customer ', LPAD(seq, 8, '0'), ' with a forty-byte label'),
			TIMESTAMPADD(SECOND, seq, '2024-01-01'), (seq %% 10000000) / 100, JSON_OBJECT('i', seq, 'ok', true) FROM seq_%d_to_%d`, lo, hi)); err != nil {
			return err
		}
	}
	if err := s.exec("ANALYZE TABLE bench.t"); err != nil {
		return err
	}
	o.log("%s: %d rows loaded in %s", scenario, rows, time.Since(t0))
	return nil
}

// selectAll times the mariadb client reading bench.t whole to /dev/null
// (--quick --batch): the reference read.
func (s *mariaServer) selectAll(ctx context.Context) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, s.m.Client, "--protocol=tcp", "-h", s.m.Host, "-P", strconv.Itoa(s.m.Port), "-u", "root",
		"--quick", "--batch", "-e", "SELECT * FROM bench.t")
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = nil, &stderr // nil: /dev/null
	t := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("mariadb SELECT: %w\n%s", err, stderr.String())
	}
	return time.Since(t), nil
}

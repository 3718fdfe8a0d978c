package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/sinks/kafka"
)

// The real binary streams PostgreSQL to a real broker in exactly-once mode
// (one Kafka transaction per batch, with a high-water mark in the offsets
// topic) under a concurrent write workload (inserts, updates, deletes,
// primary-key updates, multi-table transactions) and is killed with
// SIGKILL 3 or 4 times (harness.Trials) at random moments of the stream phase. Checkpoints
// are taken every 2 s, so after a kill sluice usually resumes from a
// position older than what Kafka committed: the sink must drop what the
// mark shows as committed. A read_committed consumer then sees every
// insert, update, delete and tombstone of the stream exactly once (per
// topic, key and sluice.version), and the events folded by key and
// version equal PostgreSQL. A read_uncommitted consumer shows the aborted
// attempts the kills left behind.
func TestKafkaExactlyOnceSurvivesKill9(t *testing.T) {
	pg, k, reg := kafkaStack(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "keo"); err != nil {
		t.Fatal(err)
	}
	const items, events = 20000, 5000
	if err := pg.Exec(ctx, "keo", strings.NewReplacer("ITEMS", fmt.Sprint(items), "EVENTS", fmt.Sprint(events)).Replace(chaosSchema)); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("keo")
	dir := t.TempDir()
	offsets := filepath.Join(dir, "offsets")
	checkpoint := filepath.Join(offsets, "checkpoint.json")
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: keo
source:
  postgres:
    dsn: %s
    tables: [public.items, public.events]
    heartbeat_interval: 1s
    status_interval: 1s
sinks:
  - kafka:
      brokers: [%s]
      envelope: debezium
      exactly_once: true
      create_topics: {partitions: 3, compact: true}
      producer: {delivery_timeout: 10s}
      registry: {url: %s}
offsets: {dir: %s}
runtime:
  checkpoint_interval: 2s
  retry: {initial: 100ms, max: 2s}
`, dsn, k.Addr(), reg.URL(), offsets))
	const (
		slot        = "sluice_keo"
		offsetTopic = "keo.sluice.offsets"
		markKey     = "keo/kafka"
	)
	topics := []string{"keo.public.items", "keo.public.events"}

	// The workload runs from before the first start (changes committed
	// during the initial load are streamed after it) to the final run.
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var work chaosCounts
	workErr := make(chan error, 1)
	go func() { workErr <- chaosWorkload(wctx, dsn, items, &work, nil, 0) }()

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 9))
	// CI kills 3 or 4 times; SLUICE_TRIALS=N kills N to N+1 times.
	kills := harness.Trials(3) + rng.IntN(2)
	t.Logf("seed %d: %d kills", seed, kills)

	acl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer acl.Close()
	adm := kadm.NewClient(acl)
	watched := append(append([]string(nil), topics...), offsetTopic)
	cutTxns := 0

	var runs []*daemonProc
	d := startDaemon(t, cfg)
	runs = append(runs, d)
	d.waitAddr(t, 2*time.Minute)
	// The initial load is not exactly-once (README: its rows share one
	// version and are never skipped; a load cut by a crash is redone
	// behind truncate barriers), so the kills start once the first
	// checkpoint shows the load durable, and its op=r rows are left out
	// of the exactly-once count below.
	waitFile(t, checkpoint, d)
	for i := 0; i < kills; i++ {
		if i > 0 {
			d = startDaemon(t, cfg)
			runs = append(runs, d)
			d.waitAddr(t, 2*time.Minute)
			// The sink is open: earlier producers are fenced and the
			// mark is read; the runtime now replays from its checkpoint.
			eoWaitLog(t, d, "exactly-once mode", 2*time.Minute)
		}
		// A random moment, often before the run's first checkpoint (so
		// the next run replays what this one committed to Kafka). Every
		// second kill then also waits (a bounded while) for a
		// transaction with records on the broker, so that the kills
		// leave some for the next run's fence to abort.
		time.Sleep(time.Duration(100+rng.IntN(2400)) * time.Millisecond)
		how := "at a random moment"
		if i%2 == 1 {
			how = "at a random moment, no transaction open within 10s"
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
				if eoOpenTxn(t, adm, watched) {
					how = "mid-transaction"
					break
				}
			}
		}
		select {
		case <-d.done:
			t.Fatalf("run %d exited (%d) before its kill:\n%s", len(runs), d.exitCode(), d.logs())
		default:
		}
		age := "none"
		if st, err := os.Stat(checkpoint); err == nil {
			age = time.Since(st.ModTime()).Round(time.Millisecond).String()
		}
		d.signal(syscall.SIGKILL)
		if _, ok := d.waitExit(30 * time.Second); !ok {
			t.Fatalf("run %d still running 30s after SIGKILL", len(runs))
		}
		// Nothing fences the dead producer before the next run starts:
		// a transaction open now was cut by the kill.
		cut := eoOpenTxn(t, adm, watched)
		if cut {
			cutTxns++
		}
		t.Logf("kill %d %s: checkpoint age %s, left an open transaction: %v, %d workload transactions so far",
			i+1, how, age, cut, work.writes.Load())
	}

	// Final run: stop the workload, let sluice confirm the last
	// transaction (confirmed only once committed to Kafka), then stop it.
	d = startDaemon(t, cfg)
	runs = append(runs, d)
	d.waitAddr(t, 2*time.Minute)
	eoWaitLog(t, d, "exactly-once mode", 2*time.Minute)
	time.Sleep(time.Second) // some live traffic on the final run too
	stopWork()
	select {
	case err := <-workErr:
		if err != nil {
			t.Fatalf("workload: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("workload did not stop within a minute")
	}
	mark := commitMark(t, ctx, dsn)
	waitSlotConfirmed(t, ctx, dsn, slot, mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("final run exit %d:\n%s", code, d.logs())
	}

	// How often a run started from a checkpoint older than Kafka's mark.
	skippedRuns, skipped := 0, 0
	for _, r := range runs {
		if n := eoSkipped(eoFullLog(r)); n > 0 {
			skippedRuns++
			skipped += n
		}
	}
	t.Logf("%d runs, %d workload transactions; %d runs resumed behind Kafka and dropped %d already committed changes",
		len(runs), work.writes.Load(), skippedRuns, skipped)
	if skippedRuns == 0 {
		t.Logf("no run resumed from a checkpoint older than Kafka's mark: the skip rule was not exercised")
	}

	// Every transaction is decided (the kills' open ones were aborted by
	// the next run's fence): the last stable offsets are the ends.
	for _, topic := range watched {
		eoWaitDecided(t, k, topic)
	}

	// (c) What a read_uncommitted consumer sees on top: aborted attempts.
	type ident struct {
		topic, key, version string
		tombstone           bool
	}
	identOf := func(r *kgo.Record) ident {
		v, _ := recHeader(r, "sluice.version")
		return ident{r.Topic, string(r.Key), v, r.Value == nil}
	}
	type at struct {
		topic     string
		partition int32
		offset    int64
	}

	// maxVersion is the highest stream change's: the mark the sink keeps.
	// Snapshot rows never raise it, and rows an interrupted load reads in
	// chunks after a restart sort above earlier changes (maxAll).
	var maxVersion, maxAll pipeline.Version
	aborted, abortedDup := 0, 0
	for _, topic := range topics {
		table, want := pgRows(t, ctx, dsn, "keo", "public", strings.TrimPrefix(topic, "keo.public."))
		committed := eoReadTopic(t, k, topic, kgo.ReadCommitted())
		dec := newAvroDecoder(t, newRegistryHTTP(reg), "keo", table)
		evs := dec.decode(t, committed)

		// (a) Each stream change (and each tombstone) exactly once.
		seen := map[ident]int{}
		var stream []decodedEvent
		ops := map[string]int{}
		dups := 0
		for _, ev := range evs {
			op, _ := recHeader(ev.rec, "sluice.op")
			if op != "r" && maxVersion.Less(ev.version) {
				maxVersion = ev.version
			}
			if maxAll.Less(ev.version) {
				maxAll = ev.version
			}
			if ev.env == nil {
				op = "tombstone"
			}
			ops[op]++
			switch op {
			case "r":
				continue
			case "c", "u", "d", "tombstone":
			default:
				t.Errorf("%s/%d@%d: unexpected op %q", topic, ev.rec.Partition, ev.rec.Offset, op)
				continue
			}
			if ev.env != nil {
				stream = append(stream, ev)
			}
			id := identOf(ev.rec)
			seen[id]++
			if seen[id] == 2 {
				dups++
				if dups <= 20 {
					t.Errorf("%s: key %s version %s (%s) committed more than once (again at partition %d offset %d)",
						topic, ev.key, ev.version, op, ev.rec.Partition, ev.rec.Offset)
				}
			}
		}
		if dups > 0 {
			t.Errorf("%s: %d stream changes were committed more than once", topic, dups)
		}
		if n := checkKeyOrder(t, stream); n != 0 {
			t.Errorf("%s: %d keys went back in version (replays reached read_committed consumers)", topic, n)
		}
		if ops["c"]+ops["u"]+ops["d"] < 200 {
			t.Errorf("%s: only %d stream changes (ops %v): the workload did not run", topic, ops["c"]+ops["u"]+ops["d"], ops)
		}

		// (b) Folded by key and version, Kafka equals PostgreSQL.
		diffState(t, table, want, fold(evs), topic)

		// (c) Records only a read_uncommitted consumer sees.
		inCommitted := map[at]bool{}
		for _, r := range committed {
			inCommitted[at{r.Topic, r.Partition, r.Offset}] = true
		}
		all := eoReadTopic(t, k, topic, kgo.ReadUncommitted())
		ab, abDup := 0, 0
		for _, r := range all {
			if inCommitted[at{r.Topic, r.Partition, r.Offset}] {
				continue
			}
			ab++
			if seen[identOf(r)] > 0 {
				abDup++
			}
		}
		if len(all) != len(committed)+ab {
			t.Errorf("%s: read_uncommitted saw %d records, read_committed %d of them plus %d others", topic, len(all), len(committed), ab)
		}
		aborted += ab
		abortedDup += abDup
		t.Logf("%s: %d rows equal; committed %d records (ops %v); read_uncommitted also sees %d aborted records, %d of them changes committed later",
			topic, len(want), len(committed), ops, ab, abDup)
	}

	// The newest committed mark names the highest version in Kafka.
	marks := eoReadTopic(t, k, offsetTopic, kgo.ReadCommitted())
	var last *kgo.Record
	for _, r := range marks {
		if string(r.Key) == markKey {
			last = r
		}
	}
	if last == nil {
		t.Fatalf("no committed mark %q in %s (%d records)", markKey, offsetTopic, len(marks))
	}
	var m struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(last.Value, &m); err != nil {
		t.Fatalf("mark %s: %v", last.Value, err)
	}
	if mv, err := pipeline.ParseVersion(m.Version); err != nil || mv != maxVersion {
		t.Errorf("newest mark has version %s (%v), the highest committed stream change %s", m.Version, err, maxVersion)
	}
	abortedMarks := len(eoReadTopic(t, k, offsetTopic, kgo.ReadUncommitted())) - len(marks)

	if aborted == 0 {
		t.Logf("the %d kills left no aborted records: no kill landed inside an open transaction", kills)
	}
	t.Logf("%d kills, %d of them cut an open transaction: %d committed marks, %d aborted marks; %d aborted records in the table topics, %d of them duplicates of committed changes, none visible to read_committed",
		kills, cutTxns, len(marks), abortedMarks, aborted, abortedDup)

	// sluice verify reads the topics the same way and finds them equal;
	// an event written behind sluice's back with a higher version is
	// named with its key and column.
	expectVerifyEqual(t, cfg)
	table, want := pgRows(t, ctx, dsn, "keo", "public", "items")
	var row []any
	for _, r := range want {
		if row == nil || r[0].(int64) < row[0].(int64) {
			row = r
		}
	}
	row = append([]any(nil), row...)
	orig := row[1]
	row[1] = "forged"
	forger, err := kafka.New(kafka.Options{Name: "forger", Brokers: []string{k.Addr()}, ServerName: "keo", Envelope: "debezium",
		ConnectorName: "postgresql", Pipeline: "keo", IncompatiblePolicy: "new_subject_version"}, schema.NewSRClient(reg.URL(), schema.SRClientOptions{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := forger.Open(ctx); err != nil {
		t.Fatal(err)
	}
	forged := pipeline.Record{Op: pipeline.OpUpdate, Table: table, After: row, Version: pipeline.Version{maxAll[0], maxAll[1] + 1, 0, 2}}
	if err := forger.Write(ctx, []pipeline.Record{forged}); err != nil {
		t.Fatal(err)
	}
	if err := forger.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wantDiff := fmt.Sprintf(`key int64:%d column name: source string:%q, sink string:"forged"`, row[0], orig)
	if code, out := runVerify(t, cfg, "--sink", "kafka", "--table", "public.items", "--settle", "5s"); code != 1 || !strings.Contains(out, wantDiff) {
		t.Fatalf("verify after a forged event: exit %d, want 1 and %q\n%s", code, wantDiff, out)
	}
}

// eoReadTopic reads every record of topic up to its end offsets at the
// time of the call with the given isolation level, in partition then
// offset order. Control records (commit and abort markers) take offsets
// too, so the reader keeps them to know where each partition ends and
// returns only data records; with read_committed the ends must be the
// last stable offsets (see eoWaitDecided).
func eoReadTopic(t *testing.T, k *harness.Kafka, topic string, iso kgo.IsolationLevel) []*kgo.Record {
	t.Helper()
	ends := endOffsets(t, k, topic)
	parts := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > 0 {
			parts[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(parts) == 0 {
		return nil
	}
	cl, err := k.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	next := map[int32]int64{}
	byPart := map[int32][]*kgo.Record{}
	left := len(parts)
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("topic %s: read to %v of the ends %v", topic, next, ends)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			end := ends[r.Partition]
			if r.Offset >= end || r.Offset < next[r.Partition] {
				return
			}
			if !r.Attrs.IsControl() {
				byPart[r.Partition] = append(byPart[r.Partition], r)
			}
			next[r.Partition] = r.Offset + 1
			if r.Offset+1 == end {
				left--
			}
		})
	}
	ps := make([]int32, 0, len(byPart))
	for p := range byPart {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	var out []*kgo.Record
	for _, p := range ps {
		out = append(out, byPart[p]...)
	}
	return out
}

// eoWaitDecided waits until no transaction is open on topic: its last
// stable offsets equal its end offsets.
func eoWaitDecided(t *testing.T, k *harness.Kafka, topic string) {
	t.Helper()
	cl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		stable, err1 := adm.ListCommittedOffsets(ctx, topic)
		ends, err2 := adm.ListEndOffsets(ctx, topic)
		cancel()
		open := ""
		if err1 != nil || err2 != nil {
			open = fmt.Sprintf("list offsets: %v %v", err1, err2)
		} else {
			ends.Each(func(e kadm.ListedOffset) {
				s, ok := stable.Lookup(e.Topic, e.Partition)
				if e.Err != nil || !ok || s.Err != nil || s.Offset != e.Offset {
					open += fmt.Sprintf(" %d: stable %d end %d (%v %v)", e.Partition, s.Offset, e.Offset, e.Err, s.Err)
				}
			})
		}
		if open == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s: transactions still open after 90s:%s", topic, open)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// eoOpenTxn reports whether a transaction with records on the broker is
// open on one of topics: a partition's last stable offset is below its end.
func eoOpenTxn(t *testing.T, adm *kadm.Client, topics []string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Ends first: a stable offset below an end listed earlier is an
	// undecided transaction, not one that began between the two calls.
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Logf("list end offsets: %v", err)
		return false
	}
	stable, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		t.Logf("list last stable offsets: %v", err)
		return false
	}
	open := false
	ends.Each(func(e kadm.ListedOffset) {
		if s, ok := stable.Lookup(e.Topic, e.Partition); ok && e.Err == nil && s.Err == nil && s.Offset < e.Offset {
			open = true
		}
	})
	return open
}

// eoFullLog is the whole log of a daemon run (logs() keeps only the tail).
func eoFullLog(d *daemonProc) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// eoWaitLog waits until the run's log contains text.
func eoWaitLog(t *testing.T, d *daemonProc, text string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(eoFullLog(d), text) {
		select {
		case <-d.done:
			t.Fatalf("daemon exited (%d) before logging %q:\n%s", d.exitCode(), text, d.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("log never said %q within %s:\n%s", text, timeout, d.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var eoRecordsRe = regexp.MustCompile(`"records":(\d+)`)

// eoSkipped sums the changes a run dropped as already committed in Kafka.
func eoSkipped(log string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "dropped changes the offsets topic shows as committed") {
			continue
		}
		if m := eoRecordsRe.FindStringSubmatch(line); m != nil {
			c, _ := strconv.Atoi(m[1])
			n += c
		}
	}
	return n
}

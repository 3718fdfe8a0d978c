package integration

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// fastavroConsumer is an independent consumer: it reads the raw framed
// records that franz-go fetched (dumped as hex), looks every writer schema
// up by id in the registry over HTTP, decodes with fastavro, folds the
// events by key and sluice.version (newest wins, deletes and tombstones
// remove, unchanged TOAST fields keep the value held) and prints a few
// columns of the final rows, keyed by id.
const fastavroConsumer = `
import sys, json, io, decimal, uuid, urllib.request
import fastavro
decimal.getcontext().prec = 1000
doc = json.load(open(sys.argv[1]))
base = doc["registry"]
schemas = {}
def writer(sid):
    if sid not in schemas:
        with urllib.request.urlopen("%s/schemas/ids/%d" % (base, sid), timeout=20) as r:
            text = json.load(r)["schema"]
        schemas[sid] = fastavro.parse_schema(json.loads(text), named_schemas={})
    return schemas[sid]
def decode(b):
    assert b[0] == 0, "magic byte"
    sid = int.from_bytes(b[1:5], "big", signed=True)
    bio = io.BytesIO(b[5:])
    rec = fastavro.schemaless_reader(bio, writer(sid), None)
    assert bio.read() == b"", "trailing bytes"
    return rec
def canon(v):
    if isinstance(v, dict) and set(v) == {"scale", "value"}:
        return format(decimal.Decimal(int.from_bytes(v["value"], "big", signed=True)).scaleb(-v["scale"]), "f")
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, uuid.UUID):
        return str(v)
    return v
state = {}
for m in doc["records"]:
    key = json.dumps(decode(bytes.fromhex(m["k"])), sort_keys=True)
    ver = m["ver"]
    old = state.get(key)
    if old is not None and old[0] >= ver:
        continue  # a replay
    if m["v"] is None:
        state[key] = (ver, None)
        continue
    ev = decode(bytes.fromhex(m["v"]))
    assert ev["op"] == m["op"], (ev["op"], m["op"])
    after = ev["after"]
    if ev["op"] == "d" or after is None:
        state[key] = (ver, None)
        continue
    row = dict(after)
    for f in after.get("__sluice_unchanged", []):
        row[f] = old[1][f] if old is not None and old[1] is not None else None
    state[key] = (ver, row)
out = {}
for ver, row in state.values():
    if row is not None:
        out[str(row["id"])] = {c: canon(row[c]) for c in sys.argv[2].split(",")}
json.dump(out, sys.stdout)
`

// Every supported Postgres type goes from the real binary through a real
// broker and a real registry to a consumer that knows nothing but the
// registry: snapshot and stream inserts, updates (one leaving a TOASTed
// value unchanged, several to one key in one transaction, a primary-key
// update), deletes with tombstones; folded by key and version, every
// value equals what PostgreSQL holds. fastavro decodes the same bytes
// independently. A numeric NaN has no Avro form: its rows (one in the
// snapshot, one in the stream) land with the field null and the value in
// the header sluice.text.after.nu, which the consumer reads back.
func TestPostgresToKafkaEveryType(t *testing.T) {
	pg, k, reg := kafkaStack(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "ktypes"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "ktypes", typesSchema,
		`INSERT INTO alltypes (id, nu, t) VALUES (4, 'NaN', 'numeric NaN: no Avro form')`); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("ktypes")
	shape0 := pgShape(t, ctx, dsn, "ktypes", "alltypes")
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: ktypes
source:
  postgres:
    dsn: %s
    tables: [public.alltypes]
    heartbeat_interval: 500ms
sinks:
  - kafka:
      brokers: [%s]
      envelope: debezium
      dlq_topic: ktypes.dlq
      create_topics: {partitions: 3, compact: true}
      registry: {url: %s}
offsets: {dir: %s}
runtime: {checkpoint_interval: 50ms}
`, dsn, k.Addr(), reg.URL(), filepath.Join(dir, "offsets")))
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)

	steps := []string{
		`INSERT INTO alltypes SELECT id + 10, i2, i4, i8, n, nu, f4, f8, b, t, vc, ch, by, u, j, jb, d, tm, ttz, ts, tstz, iv, ip, net, mac, ai, at, c, pi, big FROM alltypes`,
		// Row 1's big value is TOASTed and untouched: sent as unchanged.
		`UPDATE alltypes SET i4 = i4 / 2, t = 'updated', at = array_append(at, 'more'), iv = iv / 2 WHERE id IN (1, 2)`,
		`UPDATE alltypes SET n = n + 1, jb = jb || '{"k": 1}', tstz = tstz + interval '1 day' WHERE id = 11`,
		`DELETE FROM alltypes WHERE id IN (3, 13)`,
		`UPDATE alltypes SET id = 100 WHERE id = 12`,
		`BEGIN; UPDATE alltypes SET t = 'first' WHERE id = 2; UPDATE alltypes SET t = 'second', b = NULL WHERE id = 2; INSERT INTO alltypes (id, t) VALUES (300, 'gone'); DELETE FROM alltypes WHERE id = 300; COMMIT`,
		`INSERT INTO alltypes (id, t, c, u) VALUES (200, 'late', 'blue', gen_random_uuid())`,
		`UPDATE alltypes SET ch = 'zz', by = '\xdeadbeef' WHERE id = 11`,
	}
	for _, s := range steps {
		if err := pg.Exec(ctx, "ktypes", s); err != nil {
			t.Fatal(err)
		}
	}
	mark := commitMarkOn(t, ctx, dsn, `UPDATE alltypes SET t = 'mark' WHERE id = 1`)
	waitSlotConfirmed(t, ctx, dsn, "sluice_ktypes", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	const topic = "ktypes.public.alltypes"
	// Topics as configured: 3 partitions, compacted.
	cl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx, topic)
	if err != nil || len(td[topic].Partitions) != 3 {
		t.Errorf("topic %s: %v partitions, err %v", topic, len(td[topic].Partitions), err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	compact := false
	for _, c := range rcs[0].Configs {
		if c.Key == "cleanup.policy" && c.MaybeValue() == "compact" {
			compact = true
		}
	}
	if !compact {
		t.Errorf("topic %s is not compacted", topic)
	}
	cl.Close()

	table, want := pgRows(t, ctx, dsn, "ktypes", "public", "alltypes")
	rh := newRegistryHTTP(reg)
	dec := newAvroDecoder(t, rh, "ktypes", shape0, table)
	recs := readTopic(t, k, topic)
	events := dec.decode(t, recs)
	for id, exact := range dec.exact {
		if !exact {
			t.Errorf("schema id %d: the registry's text is not the schema of any table shape (only its structure)", id)
		}
	}
	if n := checkKeyOrder(t, events); n != 0 {
		t.Logf("%d keys saw replays", n)
	}
	ops := map[string]int{}
	tombstones := 0
	for _, ev := range events {
		if ev.env == nil {
			tombstones++
			continue
		}
		ops[ev.env.Op]++
		if ev.env.Source.Connector != "postgresql" || ev.env.Source.Name != "ktypes" || ev.env.Source.DB != "ktypes" ||
			ev.env.Source.Table != "alltypes" || (ev.env.Op == "r") != (ev.env.Source.Snapshot == "true") {
			t.Errorf("%s event: source %+v", ev.env.Op, ev.env.Source)
		}
	}
	t.Logf("%d records: ops %v, %d tombstones; value subject versions %v", len(recs), ops, tombstones, rh.versions(t, topic+"-value"))
	// Deletes: 3, 13, the old key of the primary-key update, 300. The
	// snapshot read 1, 2, 3 and the NaN row 4.
	if tombstones != 4 || ops["d"] != 4 || ops["r"] != 4 {
		t.Errorf("ops %v and %d tombstones; want 4 r, 4 d and 4 tombstones", ops, tombstones)
	}

	// The NaN rows land: nothing is dead-lettered, not even the initial
	// load's truncate barrier (a compacted topic cannot hold a keyless
	// record, and the sink skips load barriers there).
	nanKeys := map[string]bool{sinktest.Key([]any{int64(4)}): true, sinktest.Key([]any{int64(14)}): true}
	if letters := readTopic(t, k, "ktypes.dlq"); len(letters) != 0 {
		t.Errorf("%d dead letters, want none: %s", len(letters), letters[0].Value)
	}
	texts := map[string]int{}
	for _, ev := range events {
		texts[ev.key] += ev.texts
	}
	for k := range nanKeys {
		if _, ok := want[k]; !ok {
			t.Fatalf("NaN row %s missing from PostgreSQL", k)
		}
		if texts[k] == 0 {
			t.Errorf("row %s: no value came from a sluice.text.after header", k)
		}
	}
	got := fold(events)
	if len(want) != 7 { // 1, 2, 4, 11, 14, 100, 200
		t.Errorf("%d rows to compare, want 7", len(want))
	}
	diffState(t, table, want, got, "alltypes")

	// The independent consumer.
	pyColumns := []string{"id", "i8", "t", "ch", "b", "u", "n", "nu", "by", "jb"}
	pyRows := fastavroFold(t, reg.URL(), recs, pyColumns)
	if len(pyRows) != len(want) {
		t.Errorf("fastavro consumer holds %d rows, want %d", len(pyRows), len(want))
	}
	for k := range nanKeys {
		delete(want, k) // it reads no headers: their nu is null there
	}
	idx := map[string]int{}
	for i, c := range table.Columns {
		idx[c.Name] = i
	}
	checked := 0
	for _, row := range want {
		id := strconv.FormatInt(row[idx["id"]].(int64), 10)
		py, ok := pyRows[id]
		if !ok {
			t.Errorf("fastavro consumer lacks row %s", id)
			continue
		}
		for _, c := range pyColumns {
			if !pySame(row[idx[c]], py[c]) {
				t.Errorf("row %s column %s: fastavro %s, PostgreSQL %s", id, c, py[c], sinktest.Canon(row[idx[c]]))
			}
			checked++
		}
	}
	t.Logf("fastavro consumer: %d rows, %d values equal to PostgreSQL", len(pyRows), checked)
}

// pgShape loads a table's current shape.
func pgShape(t *testing.T, ctx context.Context, dsn, database, table string) *pipeline.Table {
	t.Helper()
	tbl, _ := pgRows(t, ctx, dsn, database, "public", table)
	return tbl
}

// fastavroFold dumps the raw records and runs fastavroConsumer on them.
func fastavroFold(t *testing.T, registryURL string, recs []*kgo.Record, columns []string) map[string]map[string]json.RawMessage {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	if out, err := exec.Command(py, "-c", "import fastavro").CombinedOutput(); err != nil {
		t.Fatalf("fastavro is not installed (scripts/install-deps.sh installs it): %v\n%s", err, out)
	}
	type dumped struct {
		K   string  `json:"k"`
		V   *string `json:"v"`
		Ver string  `json:"ver"`
		Op  string  `json:"op"`
	}
	doc := struct {
		Registry string   `json:"registry"`
		Records  []dumped `json:"records"`
	}{Registry: registryURL}
	for _, m := range recs {
		ver, _ := recHeader(m, "sluice.version")
		op, _ := recHeader(m, "sluice.op")
		r := dumped{K: hex.EncodeToString(m.Key), Ver: ver, Op: op}
		if m.Value != nil {
			v := hex.EncodeToString(m.Value)
			r.V = &v
		}
		doc.Records = append(doc.Records, r)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "records.json")
	b, _ := json.Marshal(doc)
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "consume.py")
	if err := os.WriteFile(script, []byte(fastavroConsumer), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, in, strings.Join(columns, ","))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fastavro consumer: %v\n%s", err, stderr.String())
	}
	var rows map[string]map[string]json.RawMessage
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("fastavro consumer output: %v\n%s", err, out)
	}
	return rows
}

// pySame compares a PostgreSQL value with what the fastavro consumer
// printed for it.
func pySame(want any, got json.RawMessage) bool {
	if want == nil {
		return string(got) == "null"
	}
	var s string
	isStr := json.Unmarshal(got, &s) == nil
	switch w := want.(type) {
	case int64:
		return string(got) == strconv.FormatInt(w, 10)
	case bool:
		return string(got) == strconv.FormatBool(w)
	case string:
		return isStr && s == w
	case pipeline.UUID:
		return isStr && s == w.String()
	case []byte:
		return isStr && s == hex.EncodeToString(w)
	case pipeline.JSON:
		return isStr && sinktest.Equal(pipeline.JSON(s), w)
	case pipeline.Decimal:
		if !isStr {
			return false
		}
		d, err := pipeline.ParseDecimal(s)
		return err == nil && sinktest.Equal(d, w)
	}
	return false
}

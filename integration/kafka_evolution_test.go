package integration

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const evoConfig = `pipeline: kevo
source:
  postgres:
    dsn: %s
    tables: [public.evo]
    heartbeat_interval: 500ms
sinks:
  - kafka:
      brokers: [%s]
      incompatible_policy: %s
      create_topics: {partitions: 3, compact: true}
      registry: {url: %s}
offsets: {dir: %s}
runtime: {checkpoint_interval: 50ms}
`

// Schema evolution while streaming, against a real registry (global rule
// BACKWARD): a nullable column added mid-stream registers a second value
// version and records of both shapes decode with their own ids; a column
// type change (integer → text, which BACKWARD refuses) under
// incompatible_policy fail stops the binary with a non-zero exit and a
// message naming the column change and the registry's answer, with
// nothing of the new shape in the topic; restarted with
// new_subject_version, the pipeline registers a third version and every
// change arrives.
func TestKafkaSchemaEvolutionMidStream(t *testing.T) {
	pg, k, reg := kafkaStack(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "kevo"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "kevo",
		`CREATE TABLE evo (id bigint PRIMARY KEY, v integer NOT NULL, note text)`,
		`INSERT INTO evo SELECT g, g * 10, 'n' || g FROM generate_series(1, 20) g`); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("kevo")
	const topic, subject = "kevo.public.evo", "kevo.public.evo-value"
	shape1 := pgShape(t, ctx, dsn, "kevo", "evo")
	dir := t.TempDir()
	offsets := filepath.Join(dir, "offsets")
	cfg := writeConfig(t, dir, fmt.Sprintf(evoConfig, dsn, k.Addr(), "fail", reg.URL(), offsets))
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(offsets, "checkpoint.json"), d)

	// Shape 1 in the stream, then a nullable column added mid-stream.
	if err := pg.Exec(ctx, "kevo",
		`UPDATE evo SET note = note || '+' WHERE id <= 5`,
		`INSERT INTO evo SELECT g, g * 10, 'n' || g FROM generate_series(21, 25) g`,
		`DELETE FROM evo WHERE id = 6`,
		`ALTER TABLE evo ADD COLUMN n text`,
		`INSERT INTO evo (id, v, note, n) VALUES (26, 260, 'after add', 'new column')`,
		`UPDATE evo SET n = 'set' WHERE id = 1`,
	); err != nil {
		t.Fatal(err)
	}
	shape2 := pgShape(t, ctx, dsn, "kevo", "evo")
	mark := commitMarkOn(t, ctx, dsn, `UPDATE evo SET note = 'mark' WHERE id = 2`)
	waitSlotConfirmed(t, ctx, dsn, "sluice_kevo", mark, d)

	rh := newRegistryHTTP(reg)
	vs := rh.versions(t, subject)
	if len(vs) != 2 {
		t.Fatalf("%s has versions %v, want 2 (initial shape, added column)", subject, vs)
	}
	id1, id2 := rh.versionID(t, subject, vs[0]), rh.versionID(t, subject, vs[1])
	dec := newAvroDecoder(t, rh, "kevo", shape1, shape2)
	events := dec.decode(t, readTopic(t, k, topic))
	perID := map[int]int{}
	for _, ev := range events {
		if ev.env == nil {
			continue
		}
		perID[ev.valueID]++
		img := ev.env.After
		if img == nil {
			img = ev.env.Before
		}
		if want := map[int]int{id1: 3, id2: 4}[ev.valueID]; len(img) != want {
			t.Errorf("record under schema id %d decoded to %d columns, want %d", ev.valueID, len(img), want)
		}
		if _, ok := img[1].(int64); !ok && ev.env.Op != "d" {
			t.Errorf("v decoded as %T under schema id %d", img[1], ev.valueID)
		}
	}
	// 20 snapshot rows, 5 updates, 5 inserts and a delete under shape 1;
	// an insert, an update and the mark under shape 2.
	if len(perID) != 2 || perID[id1] != 31 || perID[id2] != 3 {
		t.Errorf("events per value schema id %v; want %d: 31, %d: 3", perID, id1, id2)
	}

	// An incompatible change: v becomes text. Policy fail stops the
	// pipeline before anything of the new shape is produced.
	before := endOffsets(t, k, topic)
	if err := pg.Exec(ctx, "kevo",
		`ALTER TABLE evo ALTER COLUMN v TYPE text USING v::text`,
		// Every row changes under the new shape.
		`UPDATE evo SET v = v || '!'`,
	); err != nil {
		t.Fatal(err)
	}
	code, exited := d.waitExit(2 * time.Minute)
	if !exited {
		t.Fatalf("daemon still running 2m after an incompatible shape under policy fail:\n%s", d.logs())
	}
	logs := d.logs()
	if code == 0 {
		t.Fatalf("daemon exited 0 after an incompatible shape:\n%s", logs)
	}
	for _, want := range []string{"incompatible", "column v: type int32", "→ string", subject, "registry: subject"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the stop does not say %q:\n%s", want, logs)
		}
	}
	t.Logf("exit %d; %s", code, lastLineWith(logs, "incompatible"))
	if vs := rh.versions(t, subject); len(vs) != 2 {
		t.Errorf("%s has versions %v after the refusal, want 2", subject, vs)
	}
	if after := endOffsets(t, k, topic); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("records produced despite the refused shape: end offsets %v → %v", before, after)
	}

	// Restarted with new_subject_version: the shape becomes version 3 and
	// the pipeline goes on from where it stopped.
	cfg = writeConfig(t, dir, fmt.Sprintf(evoConfig, dsn, k.Addr(), "new_subject_version", reg.URL(), offsets))
	d = startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	if err := pg.Exec(ctx, "kevo",
		`INSERT INTO evo (id, v, note, n) VALUES (27, 'seven', 'late', 'n27')`,
		`DELETE FROM evo WHERE id = 2`,
		`UPDATE evo SET v = 'changed', n = NULL WHERE id = 3`,
	); err != nil {
		t.Fatal(err)
	}
	mark = commitMarkOn(t, ctx, dsn, `UPDATE evo SET note = 'mark 2' WHERE id = 4`)
	waitSlotConfirmed(t, ctx, dsn, "sluice_kevo", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	vs = rh.versions(t, subject)
	if len(vs) != 3 {
		t.Fatalf("%s has versions %v, want 3", subject, vs)
	}
	id3 := rh.versionID(t, subject, vs[2])
	var level map[string]string
	if st := rh.get(t, "/config/"+url.PathEscape(subject), &level); st != 200 {
		t.Errorf("GET /config/%s: status %d", subject, st)
	} else if l := level["compatibilityLevel"] + level["compatibility"]; l != "BACKWARD" {
		t.Errorf("%s level after the forced version: %v", subject, level)
	}

	table, want := pgRows(t, ctx, dsn, "kevo", "public", "evo")
	dec.addShape(t, "kevo", table)
	events = dec.decode(t, readTopic(t, k, topic))
	perID = map[int]int{}
	for _, ev := range events {
		if ev.env != nil {
			perID[ev.valueID]++
		}
	}
	if perID[id1] != 31 || perID[id2] != 3 || perID[id3] < 25+4 {
		t.Errorf("events per value schema id %v; want %d: 31, %d: 3, %d: at least 29", perID, id1, id2, id3)
	}
	if n := checkKeyOrder(t, events); n != 0 {
		t.Logf("%d keys saw replays", n)
	}
	got := fold(events)
	for k, row := range got {
		if len(row) != len(table.Columns) {
			t.Errorf("key %s: last event has %d columns (an older shape)", k, len(row))
		}
	}
	diffState(t, table, want, got, "evo")
	t.Logf("%d rows equal; value schema ids %d, %d, %d; events per id %v", len(want), id1, id2, id3, perID)
}

// lastLineWith returns the last log line containing s.
func lastLineWith(logs, s string) string {
	lines := strings.Split(logs, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

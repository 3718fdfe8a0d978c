package postgres

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/pipeline"
)

// pgoutput builds protocol messages by hand for deterministic decoder
// tests (the layouts of the PostgreSQL docs' "Logical Replication Message
// Formats").
type pgoutput []byte

func (b pgoutput) u8(v byte) pgoutput    { return append(b, v) }
func (b pgoutput) u16(v uint16) pgoutput { return binary.BigEndian.AppendUint16(b, v) }
func (b pgoutput) u32(v uint32) pgoutput { return binary.BigEndian.AppendUint32(b, v) }
func (b pgoutput) u64(v uint64) pgoutput { return binary.BigEndian.AppendUint64(b, v) }
func (b pgoutput) str(s string) pgoutput { return append(append(b, s...), 0) }
func (b pgoutput) tuple(vals ...string) pgoutput {
	b = b.u16(uint16(len(vals)))
	for _, v := range vals {
		b = append(b.u8('t').u32(uint32(len(v))), v...)
	}
	return b
}

const tieRel = 16384

// tieRelation is public.t (id int4 key, v text), REPLICA IDENTITY DEFAULT.
func tieRelation() pgoutput {
	return pgoutput{'R'}.u32(tieRel).str("public").str("t").u8('d').u16(2).
		u8(1).str("id").u32(23).u32(^uint32(0)).
		u8(0).str("v").u32(25).u32(^uint32(0))
}

// A transaction whose commit record starts exactly at the slot's
// consistent point is not in the exported snapshot and is streamed with
// commit LSN = consistent point. Its first change — an update, a delete or
// a truncate — must still sort above every snapshot row and barrier, in
// whichever order the sink receives them, or every sink drops it.
func TestChangeCommittedAtTheConsistentPointSortsAboveTheSnapshot(t *testing.T) {
	const cp = pglogrepl.LSN(0x16B3748)
	changes := map[string]pgoutput{
		"update":   pgoutput{'U'}.u32(tieRel).u8('N').tuple("1", "streamed"),
		"delete":   pgoutput{'D'}.u32(tieRel).u8('K').tuple("1", ""),
		"truncate": pgoutput{'T'}.u32(1).u8(0).u32(tieRel),
	}
	for name, change := range changes {
		for _, snapshotFirst := range []bool{true, false} {
			d, err := NewDecoder(DecoderOptions{Database: "shop"})
			if err != nil {
				t.Fatal(err)
			}
			var streamed []pipeline.Record
			emit := func(c Chunk) error { streamed = append(streamed, c.Records...); return nil }
			for _, m := range []pgoutput{
				tieRelation(),
				pgoutput{'B'}.u64(uint64(cp)).u64(0).u32(900),
				change,
				pgoutput{'C'}.u8(0).u64(uint64(cp)).u64(uint64(cp + 0x38)).u64(0),
			} {
				if err := d.Decode(context.Background(), m, cp, emit); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			if len(streamed) != 1 {
				t.Fatalf("%s: %d records", name, len(streamed))
			}
			table := d.Tables()[pipeline.TableID{Database: "shop", Schema: "public", Table: "t"}]
			snapshot := []pipeline.Record{
				{Op: pipeline.OpTruncate, Table: table, Version: snapshotVersion(0, cp, barrierIndex), Snapshot: true},
				{Op: pipeline.OpRead, Table: table, After: []any{int32(1), "snapshot"}, Version: snapshotVersion(0, cp, snapshotRow), Snapshot: true},
			}
			for _, r := range snapshot {
				if !r.Version.Less(streamed[0].Version) {
					t.Fatalf("%s: snapshot %v does not sort below the streamed change %v", name, r.Version, streamed[0].Version)
				}
			}
			sink := newMemSink()
			if snapshotFirst {
				sink.Apply(snapshot)
				sink.Apply(streamed)
			} else {
				sink.Apply(streamed)
				sink.Apply(snapshot)
			}
			got := sink.Table("public.t")
			want := map[string]int{"update": 1, "delete": 0, "truncate": 0}[name]
			if len(got) != want || (want == 1 && got[0] != "[1 streamed]") {
				t.Fatalf("%s (snapshot first: %v): sink holds %q", name, snapshotFirst, got)
			}
		}
	}
}

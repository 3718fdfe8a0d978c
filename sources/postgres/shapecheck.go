package postgres

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A schema change with no row change after it sends no Relation message:
// pgoutput describes a table only before its next change. So that a column
// added to a table that then stays idle (with the DEFAULT its existing rows
// now read) still reaches the sinks, every heartbeat also carries a digest
// of each published table's columns as the catalog held them, computed in
// the statement that writes the heartbeat (heartbeatSQL). The catalog
// snapshot of that statement holds every DDL committed before the message
// and none committed after it, so at the message's position in the WAL the
// digest is the table's shape. The decoder compares it with the newest
// shape it decoded; a table that differs gets the catalog's shape as if a
// Relation message had arrived there, and an OpShape record of it goes out
// with the heartbeat (Invariant 11): every change before the message was
// decoded with an older shape, every change after it with this one or a
// newer one.

// heartbeatSQL is the heartbeat statement for a server of version v: $1
// the prefix, $2 the time, $3 the publication. The content is JSON:
// {"t": time, "s": [[relation OID, schema, table, digest], …], "p": whether
// the publication publishes every operation} (published.go).
func heartbeatSQL(v int) string {
	published := ""
	if v >= 150000 {
		// A publication's column list (PostgreSQL 15+) limits the
		// columns pgoutput sends, so the digest covers those only.
		published = " AND a.attname = ANY(p.attnames)"
	}
	return `SELECT pg_logical_emit_message(false, $1::text, json_build_object('t', $2::text, 's', (
	SELECT coalesce(json_agg(json_build_array(c.oid::bigint, p.schemaname, p.tablename, md5(d.sig))), '[]'::json)
	FROM pg_catalog.pg_publication_tables p
	JOIN pg_catalog.pg_namespace n ON n.nspname = p.schemaname
	JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename
	CROSS JOIN LATERAL (SELECT coalesce(string_agg(a.attname || ':' || a.atttypid || ':' || a.atttypmod, '|' ORDER BY a.attnum), '') AS sig
		FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''` + published + `) d
	WHERE p.pubname = $3),
	'p', (SELECT pubinsert AND pubupdate AND pubdelete AND pubtruncate FROM pg_catalog.pg_publication WHERE pubname = $3))::text)`
}

// heartbeatContent is a heartbeat message's JSON content.
type heartbeatContent struct {
	Time   string            `json:"t"`
	Shapes []json.RawMessage `json:"s"`
}

// shapeCheck is one table of a heartbeat: its catalog digest.
type shapeCheck struct {
	oid           uint32
	schema, table string
	digest        string
}

// parseHeartbeat splits a heartbeat's content into its time text and its
// shape checks. Content that is not JSON is a time alone (heartbeats of
// older versions).
func parseHeartbeat(content []byte) (string, []shapeCheck) {
	if len(content) == 0 || content[0] != '{' {
		return string(content), nil
	}
	var hc heartbeatContent
	if err := json.Unmarshal(content, &hc); err != nil {
		return string(content), nil
	}
	return hc.Time, parseChecks(hc.Shapes)
}

// parseChecks reads a heartbeat's table entries, skipping malformed ones.
func parseChecks(shapes []json.RawMessage) []shapeCheck {
	var out []shapeCheck
	for _, raw := range shapes {
		var parts []json.RawMessage
		if json.Unmarshal(raw, &parts) != nil || len(parts) != 4 {
			continue
		}
		var c shapeCheck
		var oid uint64
		if json.Unmarshal(parts[0], &oid) != nil || json.Unmarshal(parts[1], &c.schema) != nil ||
			json.Unmarshal(parts[2], &c.table) != nil || json.Unmarshal(parts[3], &c.digest) != nil {
			continue
		}
		c.oid = uint32(oid)
		out = append(out, c)
	}
	return out
}

// shapeDigest is the digest heartbeatSQL computes, of a decoded shape.
func shapeDigest(cols []ColumnInfo) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(c.Name)
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(uint64(c.OID), 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(int64(c.TypMod), 10))
	}
	sum := md5.Sum([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// checkShapes returns an OpShape record, versioned at the heartbeat, for
// each table of checks whose newest decoded shape differs from the
// heartbeat's digest and whose catalog still holds the shape of the
// heartbeat's time (otherwise a later heartbeat or the table's next change
// brings it). Nothing is checked while a streamed transaction is open: its
// Relation messages describe uncommitted shapes.
func (d *Decoder) checkShapes(ctx context.Context, checks []shapeCheck, lsn pglogrepl.LSN, rec pipeline.Record) []pipeline.Record {
	if len(checks) == 0 || d.opts.Catalog == nil || len(d.streams) > 0 {
		return nil
	}
	var out []pipeline.Record
	for _, c := range checks {
		if cur := d.rels[c.oid]; cur != nil && shapeDigest(cur.Columns) == c.digest {
			continue
		}
		if m := d.shapeMiss[c.oid]; m != nil && m.digest == c.digest && m.skips < missSkips {
			// This digest already missed the catalog (heartbeats of a
			// backlog): look again only every missSkips of them.
			m.skips++
			continue
		}
		cs, err := d.opts.Catalog(ctx, c.oid, c.schema, c.table)
		if err != nil || cs == nil || cs.RelationOID != c.oid || shapeDigest(cs.Columns) != c.digest {
			// The catalog has moved on (or the table is gone): a later
			// heartbeat, or the table's next change, carries the shape.
			d.log.Debug("shape check skipped", zap.String("schema", c.schema), zap.String("table", c.table), zap.Error(err))
			if err == nil {
				if d.shapeMiss == nil {
					d.shapeMiss = map[uint32]*shapeMiss{}
				}
				d.shapeMiss[c.oid] = &shapeMiss{digest: c.digest}
			}
			continue
		}
		delete(d.shapeMiss, c.oid)
		id := pipeline.TableID{Database: d.opts.Database, Schema: c.schema, Table: c.table}
		d.mu.Lock()
		prev := d.latest[id]
		d.mu.Unlock()
		if err := d.applyRelation(ctx, catalogRelation(cs, c.schema, c.table), lsn); err != nil {
			d.log.Warn("shape from the catalog not applied", zap.Stringer("table", id), zap.Error(err))
			continue
		}
		d.mu.Lock()
		now := d.latest[id]
		d.mu.Unlock()
		if now == nil || now == prev {
			continue
		}
		d.log.Info("table shape changed with no row change after it", zap.Stringer("table", id),
			zap.Int("generation", now.Table.Generation), zap.Stringer("lsn", lsn))
		r := pipeline.Record{Op: pipeline.OpShape, Table: now.Table, Version: rec.Version, EventTime: rec.EventTime}
		r.Size = pipeline.EstimateSize(&r)
		out = append(out, r)
	}
	return out
}

// shapeMiss is a heartbeat digest the catalog did not hold, and how many
// heartbeats with it were not looked up since.
type shapeMiss struct {
	digest string
	skips  int
}

// missSkips bounds how long a missed digest goes unchecked (a table whose
// catalog returns to that shape is then found within that many heartbeats).
const missSkips = 10

// catalogRelation is the Relation message pgoutput would send for the
// catalog shape s: key flags on the replica identity's columns (all of
// them under REPLICA IDENTITY FULL).
func catalogRelation(s *TableShape, schema, table string) *pglogrepl.RelationMessage {
	rel := &pglogrepl.RelationMessage{RelationID: s.RelationOID, Namespace: schema, RelationName: table,
		ReplicaIdentity: s.ReplicaIdentity, ColumnNum: uint16(len(s.Columns))}
	for i, ci := range s.Columns {
		var flags uint8
		if s.ReplicaIdentity == 'f' || (s.ReplicaIdentity != 'n' && s.Table.Columns[i].Key) {
			flags = 1
		}
		rel.Columns = append(rel.Columns, &pglogrepl.RelationMessageColumn{Flags: flags, Name: ci.Name,
			DataType: ci.OID, TypeModifier: ci.TypMod})
	}
	return rel
}

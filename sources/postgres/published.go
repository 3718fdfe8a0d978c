package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A captured table dropped from the publication while the stream runs
// (ALTER PUBLICATION … DROP TABLE, or SET TABLE without it), or a
// publication no longer publishing every operation (SET (publish =
// 'insert')), sends no change of what it left out from then on, with no
// error anywhere. Every heartbeat lists the publication's tables as of its
// place in the WAL (heartbeatSQL) and whether it publishes every
// operation, so the decoder sees the moment a captured table stops being
// published: it puts the publication back (Republish, the same step as at
// start) with a rewrite message per table, and the table is read again
// from there (an OpRewrite); the read's sweep removes from the sinks the rows
// deleted while the table was left out (snapshot/, Invariant 14). A table
// left out while sluice was stopped (no heartbeat shows it) is put back at
// start with a rewrite message in the same transaction (ensurePublication),
// so the stream reads it again from there, even after a crash right after
// the start.

// WatchHooks count what the publication watch finds (Invariant 9); nil
// hooks count nothing.
type WatchHooks struct {
	// LeftOut is called for each change of a table the pipeline does not
	// capture that the publication sent (notCaptured).
	LeftOut func()
	// Gone is told, after each check that found a captured table left
	// out or back, how many captured tables no longer exist.
	Gone func(n int)
}

// Republished is what putting the publication back did.
type Republished struct {
	// Gone are the captured tables that no longer exist.
	Gone []pipeline.TableID
	// At is the WAL position after it.
	At uint64
}

// published is a heartbeat's view of the publication.
type published struct {
	tables map[[2]string]bool // schema, table
	allOps bool               // insert, update, delete and truncate
}

// publishedOf reads the publication's view from a heartbeat's content;
// false when the heartbeat carries none (older heartbeats, or one whose
// catalog query failed and that carries its time alone).
func publishedOf(content []byte) (published, bool) {
	var hc struct {
		Shapes []json.RawMessage `json:"s"`
		AllOps *bool             `json:"p"`
	}
	if len(content) == 0 || content[0] != '{' || json.Unmarshal(content, &hc) != nil || hc.Shapes == nil || hc.AllOps == nil {
		return published{}, false
	}
	p := published{tables: map[[2]string]bool{}, allOps: *hc.AllOps}
	for _, c := range parseChecks(hc.Shapes) {
		p.tables[[2]string{c.schema, c.table}] = true
	}
	return p, true
}

// checkPublished puts the publication back when the heartbeat rec shows a
// captured table left out of it, and has the tables it left out read
// again: Republish commits, with the change that puts them back, a rewrite
// message per table, which the stream reads as an OpRewrite from there
// (and again after a crash, until a checkpoint passes it). Not a table
// that no longer exists (dropped, or renamed away): such a table is
// watched. While the heartbeats show it left out, each puts the
// publication back again (Republish is quiet for tables already gone), so
// a table created again under the name is added and read from there; one
// the heartbeats show published again (renamed back, or taken in by a
// publication FOR ALL TABLES) is read again too, since its changes under
// the other name were left out (notCaptured). Republish writes a message
// for every table it puts back, and for every table that was gone and
// exists when it runs: also one back before the heartbeat was decoded,
// which no later heartbeat would show as back.
// Heartbeats written before this session's last Republish show what it
// put back already and are not checked; after a restart, one replayed
// from before puts back nothing, and the messages the earlier run
// committed with what it put back follow it. A publication the role
// cannot put back stops the source: the tables' changes would be lost for
// as long as it stays so; a failed read is retried (the stream reconnects
// and meets the heartbeat again).
func (d *Decoder) checkPublished(ctx context.Context, content []byte, rec pipeline.Record) error {
	if d.opts.Republish == nil || len(d.streams) > 0 || rec.Version[1] < d.republishedAt {
		return nil
	}
	p, ok := publishedOf(content)
	if !ok {
		return nil
	}
	// read: the tables that were gone, to read again if they exist now
	// (Republish skips those still gone).
	var out, left, back, read []pipeline.TableID
	for _, id := range d.opts.Tables {
		published := p.allOps && p.tables[[2]string{id.Schema, id.Table}]
		gone := slices.Contains(d.gone, id)
		switch {
		case published && gone:
			back = append(back, id)
		case !published:
			out = append(out, id)
			if !gone {
				left = append(left, id)
			}
		}
		if gone {
			read = append(read, id)
		}
	}
	if len(out) == 0 && len(back) == 0 {
		return nil
	}
	if len(left) > 0 {
		d.log.Warn("captured tables are not published (the publication was altered): putting the publication back "+
			"and reading the tables again (the read sweeps from the sinks the rows deleted in between)",
			zap.Stringers("tables", left), zap.Bool("every_operation_published", p.allOps), zap.Uint64("lsn", rec.Version[1]))
	}
	if len(back) > 0 {
		d.log.Warn("captured tables that no longer existed are published again (renamed back, or created again): reading them again "+
			"(the read sweeps from the sinks the rows it does not find)", zap.Stringers("tables", back))
	}
	d.gone = slices.DeleteFunc(d.gone, func(id pipeline.TableID) bool { return slices.Contains(back, id) })
	// A table that was gone and exists now is read again, also one that
	// came back before this heartbeat was decoded, which no later one
	// shows as back. One left out that the publication holds again by now
	// is not: put back by a run before a restart, that run's message
	// follows in the log (a table new to the pipeline shows as left out
	// in the heartbeats before it, and is read once).
	put, err := d.opts.Republish(ctx, read)
	if err != nil {
		// Fatal stays fatal (a statement the role may not run); a failed
		// read is retried: the stream reconnects and meets this heartbeat
		// again.
		return fmt.Errorf("postgres source: captured tables %v are not published and the publication could not be put back: %w", out, err)
	}
	d.republishedAt = put.At
	for _, id := range put.Gone {
		if !slices.Contains(d.gone, id) {
			d.log.Warn("a captured table no longer exists (dropped or renamed); it is read again if a table of the name appears",
				zap.Stringer("table", id))
		}
	}
	d.gone = put.Gone
	if d.opts.Watch.Gone != nil {
		d.opts.Watch.Gone(len(d.gone))
	}
	return nil
}

// notCaptured reports whether t is a table the pipeline does not capture
// although the publication sends its changes: a captured table renamed
// (the publication holds the relation, whatever its name; its changes
// would fill a sink table of the new name with the rows that happen to
// change), or a table added to the publication by hand. Its changes are
// left out, with a warning once per table. With no captured tables
// listed, every table is captured.
func (d *Decoder) notCaptured(t *pipeline.Table) bool {
	if len(d.opts.Tables) == 0 || t == d.lastCaptured {
		return false // the common case, a run of changes of one table: no lookup
	}
	id := t.ID
	if d.captured == nil {
		d.captured, d.leftOut = map[pipeline.TableID]bool{}, map[pipeline.TableID]bool{}
		for _, t := range d.opts.Tables {
			d.captured[t] = true
		}
	}
	if d.captured[id] {
		d.lastCaptured = t
		return false
	}
	if d.opts.Watch.LeftOut != nil {
		d.opts.Watch.LeftOut()
	}
	if !d.leftOut[id] {
		d.leftOut[id] = true
		d.log.Warn("the publication sends changes of a table the pipeline does not capture (a captured table renamed, "+
			"or a table added to the publication by hand): they are left out; list the table to capture it",
			zap.Stringer("table", id))
	}
	return true
}

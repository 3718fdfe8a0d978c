package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// streamNew is the bulk-load path without the batch fold: a Write whose
// records are all inserts or snapshot reads of one table shape, into a
// target table that already has every column, is COPYed into the target
// converting each record as the COPY streams (so conversion overlaps the
// server's work). Nothing is folded: a key present twice (a duplicate in
// the batch) or already in the target makes the primary key refuse the
// COPY, the transaction is rolled back and the caller takes the staged
// path, which also reports values that cannot be converted (Invariant 7).
// It returns whether the records were written, durably (committed).
func (s *Sink) streamNew(ctx context.Context, records []pipeline.Record) (bool, error) {
	t := upsert.InsertShape(records)
	if t == nil {
		return false, nil
	}
	target := s.targetName(t.ID)
	have, ok := s.tables[target]
	if !ok {
		return false, nil
	}
	for i := range t.Columns {
		if _, ok := have[strings.ToLower(t.Columns[i].Name)]; !ok {
			return false, nil
		}
	}
	st := s.direct.For(target)
	if !directTypes(t.Columns) || !st.Try() {
		return false, nil
	}
	src := &recordSource{ctx: ctx, recs: records, t: t, now: s.now().UTC(), vbuf: make([]byte, 32*len(records))}
	if b, ok := s.barriers[target]; ok {
		src.barrier = &b
	}
	return s.bulkCopy(ctx, s.conn, target, t.Columns, src, st)
}

// recordSource feeds records to CopyFrom, converting them on the way and
// skipping those below the table's truncate barrier (Invariant 4).
type recordSource struct {
	ctx     context.Context
	recs    []pipeline.Record
	t       *pipeline.Table
	barrier *pipeline.Version
	now     time.Time
	i       int
	vals    []any
	vbuf    []byte // 32 bytes per record for the versions
	err     error
}

func (r *recordSource) Next() bool {
	for r.i < len(r.recs) {
		rec := &r.recs[r.i]
		r.i++
		if r.i%1024 == 0 {
			if r.err = r.ctx.Err(); r.err != nil {
				return false
			}
		}
		if rec.Op == pipeline.OpHeartbeat || (r.barrier != nil && rec.Version.Less(*r.barrier)) {
			continue
		}
		return true
	}
	return false
}

func (r *recordSource) Values() ([]any, error) {
	rec := &r.recs[r.i-1]
	n := len(r.t.Columns)
	if r.vals == nil {
		r.vals = make([]any, n+3)
	}
	for c := range n {
		v, err := toStage(&r.t.Columns[c], rec.After[c])
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", r.t.Columns[c].Name, err)
		}
		r.vals[c] = v
	}
	vb := r.vbuf[32*(r.i-1) : 32*r.i : 32*r.i]
	for c, x := range rec.Version {
		binary.BigEndian.PutUint64(vb[8*c:], x)
	}
	r.vals[n], r.vals[n+1], r.vals[n+2] = vb, false, r.now
	return r.vals, nil
}

func (r *recordSource) Err() error { return r.err }

package schema

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/sluice-cdc/sluice/pipeline"
)

// The reference encoder: the generic path that builds map[string]any per
// record (with the converters of convert.go) and hands it to hamba. The
// direct writer of encode.go must produce the same bytes and errors.

func (c *Codec) refEncodeKey(r *pipeline.Record) ([]byte, error) {
	if err := c.check(r); err != nil {
		return nil, err
	}
	if c.key == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoKey, c.table.ID)
	}
	img, before := r.After, false
	if img == nil {
		img, before = r.Before, true
	}
	if img == nil || !r.Op.IsData() || r.Op == pipeline.OpTruncate {
		return nil, fmt.Errorf("%w: %s %s", ErrNoRow, c.table.ID, r.Op)
	}
	m, err := c.refImage(c.keyPlan, img, before, false)
	if err != nil {
		return nil, err
	}
	return c.refMarshal(c.key, m)
}

func (c *Codec) refEncodeValue(r *pipeline.Record) ([]byte, error) {
	if err := c.check(r); err != nil {
		return nil, err
	}
	var img []any
	before := false
	switch r.Op {
	case pipeline.OpInsert, pipeline.OpUpdate, pipeline.OpRead:
		img = r.After
	case pipeline.OpDelete:
		img, before = r.Before, true
	}
	if img == nil {
		return nil, fmt.Errorf("%w: %s %s", ErrNoRow, c.table.ID, r.Op)
	}
	m, err := c.refImage(c.rowPlan, img, before, c.opts.Unchanged)
	if err != nil {
		return nil, err
	}
	m[FieldOp] = r.Op.String()
	m[FieldVersion] = r.Version.String()
	m[FieldDeleted] = r.Op == pipeline.OpDelete
	m[FieldSourceTsMs] = millis(r.EventTime)
	return c.refMarshal(c.value, m)
}

func (c *Codec) refEncodeEnvelope(r *pipeline.Record, src SourceInfo) ([]byte, error) {
	if err := c.check(r); err != nil {
		return nil, err
	}
	if !r.Op.IsData() {
		return nil, fmt.Errorf("schema: %s: %s record has no envelope", c.table.ID, r.Op)
	}
	m := make(map[string]any, 6)
	for _, side := range []struct {
		name   string
		img    []any
		before bool
	}{{"before", r.Before, true}, {"after", r.After, false}} {
		if side.img == nil {
			m[side.name] = nullUnion
			continue
		}
		row, err := c.refImage(c.rowPlan, side.img, side.before, c.opts.Unchanged)
		if err != nil {
			return nil, err
		}
		m[side.name] = map[string]any{c.envRow: row}
	}
	m["source"] = c.refSource(r, src)
	m["op"] = r.Op.String()
	at := src.ProcessedAt
	if at.IsZero() {
		at = time.Now()
	}
	m["ts_ms"] = map[string]any{"long": at.UnixMilli()}
	m["transaction"] = nullUnion
	if tx := src.Transaction; tx != nil {
		m["transaction"] = map[string]any{"event.block": map[string]any{
			"id": tx.ID, "total_order": tx.TotalOrder, "data_collection_order": tx.DataCollectionOrder,
		}}
	}
	return c.refMarshal(c.envelope, m)
}

func (c *Codec) refSource(r *pipeline.Record, s SourceInfo) map[string]any {
	or := func(v, def string) string {
		if v != "" {
			return v
		}
		return def
	}
	connector := or(s.Connector, or(c.opts.ConnectorName, "sluice"))
	snapshot := "false"
	if r.Op == pipeline.OpRead {
		snapshot = "true"
	}
	ts := s.TsMs
	if ts == 0 {
		ts = millis(r.EventTime)
	}
	txID := s.TxID
	if txID == nil && r.TxID != 0 && r.TxID <= math.MaxInt64 {
		v := int64(r.TxID)
		txID = &v
	}
	id := c.table.ID
	return map[string]any{
		"version":   s.Version,
		"connector": connector,
		"name":      or(s.Name, c.opts.ServerName),
		"ts_ms":     ts,
		"snapshot":  or(s.Snapshot, snapshot),
		"db":        or(s.DB, or(id.Database, id.Schema)),
		"sequence":  refOptional("string", s.Sequence),
		"schema":    or(s.Schema, id.Schema),
		"table":     or(s.Table, id.Table),
		"txId":      refOptional("long", txID),
		"lsn":       refOptional("long", s.LSN),
		"xmin":      refOptional("long", s.Xmin),
	}
}

func refOptional[T any](branch string, v *T) map[string]any {
	if v == nil {
		return nullUnion
	}
	return map[string]any{branch: *v}
}

func (c *Codec) refMarshal(s avro.Schema, m map[string]any) ([]byte, error) {
	b, err := c.api.Marshal(s, m)
	if err != nil {
		return nil, fmt.Errorf("schema: %s: encode %s: %w", c.table.ID, s.(avro.NamedSchema).FullName(), err)
	}
	return b, nil
}

func (c *Codec) refImage(plan []colPlan, img []any, before, listUnchanged bool) (map[string]any, error) {
	if len(img) != len(c.table.Columns) {
		return nil, fmt.Errorf("schema: %s: image has %d values, the shape %d columns", c.table.ID, len(img), len(c.table.Columns))
	}
	m := make(map[string]any, len(plan)+5)
	var unchanged []string
	for i := range plan {
		p := &plan[i]
		v := img[p.idx]
		switch v.(type) {
		case nil:
			switch {
			case p.nullable:
				m[p.name] = nullUnion
			case before:
				z, err := p.conv(zeroValue(p.col.Type))
				if err != nil {
					return nil, err
				}
				m[p.name] = z
			default:
				return nil, c.encErr(p.col, v, errors.New("NULL in a NOT NULL column"))
			}
			continue
		case pipeline.Unchanged:
			if !c.opts.Unchanged || !listUnchanged || !p.nullable || p.col.Key {
				return nil, c.encErr(p.col, v, errors.New("unchanged value not representable (Options.Unchanged is off, or a key column)"))
			}
			m[p.name] = nullUnion
			unchanged = append(unchanged, p.name)
			continue
		}
		n, err := p.conv(v)
		if err != nil {
			return nil, c.encErr(p.col, v, err)
		}
		if p.nullable {
			n = map[string]any{p.branch: n}
		}
		m[p.name] = n
	}
	if listUnchanged {
		if unchanged == nil {
			unchanged = []string{}
		}
		m[FieldUnchanged] = unchanged
	}
	return m, nil
}

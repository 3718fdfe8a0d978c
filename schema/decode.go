package schema

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Row is a decoded Value record (the flattened form).
type Row struct {
	// Values is aligned with Table.Columns; fields listed in
	// __sluice_unchanged come back as pipeline.UnchangedValue.
	Values     []any
	Op         string
	Version    pipeline.Version
	Deleted    bool
	SourceTsMs int64
}

// Envelope is a decoded Envelope record.
type Envelope struct {
	Before, After []any // nil when null; aligned with Table.Columns
	Op            string
	TsMs          *int64
	Source        SourceInfo // Transaction set when the block is not null
}

// DecodeKey reads an EncodeKey payload (unframed) back into the key values
// in key order, as pipeline values.
func (c *Codec) DecodeKey(payload []byte) ([]any, error) {
	if c.key == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoKey, c.table.ID)
	}
	var m map[string]any
	if err := c.api.Unmarshal(c.key, payload, &m); err != nil {
		return nil, fmt.Errorf("schema: %s: decode key: %w", c.table.ID, err)
	}
	vals, err := c.fromImage(c.keyPlan, m)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(c.keyPlan))
	for i, p := range c.keyPlan {
		out[i] = vals[p.idx]
	}
	return out, nil
}

// DecodeValue reads an EncodeValue payload (unframed). Decoding inverts the
// type mapping of KeySchema: the clamp values of infinite dates and
// timestamps come back as infinities, decimals with the column's scale.
func (c *Codec) DecodeValue(payload []byte) (*Row, error) {
	var m map[string]any
	if err := c.api.Unmarshal(c.value, payload, &m); err != nil {
		return nil, fmt.Errorf("schema: %s: decode value: %w", c.table.ID, err)
	}
	vals, err := c.fromImage(c.rowPlan, m)
	if err != nil {
		return nil, err
	}
	row := &Row{Values: vals}
	row.Op, _ = m[FieldOp].(string)
	row.Deleted, _ = m[FieldDeleted].(bool)
	row.SourceTsMs, _ = m[FieldSourceTsMs].(int64)
	if s, _ := m[FieldVersion].(string); s != "" {
		if row.Version, err = pipeline.ParseVersion(s); err != nil {
			return nil, err
		}
	}
	return row, nil
}

// DecodeEnvelope reads an EncodeEnvelope payload (unframed).
func (c *Codec) DecodeEnvelope(payload []byte) (*Envelope, error) {
	var m map[string]any
	if err := c.api.Unmarshal(c.envelope, payload, &m); err != nil {
		return nil, fmt.Errorf("schema: %s: decode envelope: %w", c.table.ID, err)
	}
	e := &Envelope{}
	e.Op, _ = m["op"].(string)
	for _, side := range []struct {
		name string
		dst  *[]any
	}{{"before", &e.Before}, {"after", &e.After}} {
		img, ok := unionValue(m[side.name]).(map[string]any)
		if !ok {
			continue
		}
		vals, err := c.fromImage(c.rowPlan, img)
		if err != nil {
			return nil, err
		}
		*side.dst = vals
	}
	if ts, ok := unionValue(m["ts_ms"]).(int64); ok {
		e.TsMs = &ts
	}
	src, _ := m["source"].(map[string]any)
	str := func(k string) string { s, _ := src[k].(string); return s }
	optLong := func(k string) *int64 {
		if v, ok := unionValue(src[k]).(int64); ok {
			return &v
		}
		return nil
	}
	e.Source = SourceInfo{Version: str("version"), Connector: str("connector"), Name: str("name"),
		Snapshot: str("snapshot"), DB: str("db"), Schema: str("schema"), Table: str("table"),
		TxID: optLong("txId"), LSN: optLong("lsn"), Xmin: optLong("xmin")}
	e.Source.TsMs, _ = src["ts_ms"].(int64)
	if s, ok := unionValue(src["sequence"]).(string); ok {
		e.Source.Sequence = &s
	}
	if tx, ok := unionValue(m["transaction"]).(map[string]any); ok {
		t := &Transaction{}
		t.ID, _ = tx["id"].(string)
		t.TotalOrder, _ = tx["total_order"].(int64)
		t.DataCollectionOrder, _ = tx["data_collection_order"].(int64)
		e.Source.Transaction = t
	}
	return e, nil
}

// unionValue unwraps hamba's generic union form {"branch": value} (used for
// named and logical branches; plain primitives come back bare); null (nil or
// an empty map) is nil. No record of this package has a single field, so a
// one-entry map is always a union wrapper.
func unionValue(v any) any {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		if ok && len(m) == 0 {
			return nil
		}
		return v
	}
	for _, x := range m {
		return x
	}
	return nil
}

func (c *Codec) fromImage(plan []colPlan, m map[string]any) ([]any, error) {
	vals := make([]any, len(c.table.Columns))
	for i := range plan {
		p := &plan[i]
		v, ok := m[p.name]
		if !ok {
			return nil, fmt.Errorf("schema: %s: decoded record lacks field %q", c.table.ID, p.name)
		}
		if p.nullable {
			// hamba decodes a union to nil (null), to the bare value for a
			// plain primitive branch, else to {"branch": value}.
			if um, ok := v.(map[string]any); ok && len(um) <= 1 {
				if len(um) == 0 {
					continue
				}
				if x, ok := um[p.branch]; ok {
					v = x
				}
			}
			if v == nil {
				continue
			}
		}
		x, err := fromNative(p.col, p.col.Type, v)
		if err != nil {
			return nil, c.encErr(p.col, v, fmt.Errorf("decode: %w", err))
		}
		vals[p.idx] = x
	}
	if list, ok := m[FieldUnchanged].([]any); ok {
		byName := make(map[string]int, len(plan))
		for _, p := range plan {
			byName[p.name] = p.idx
		}
		for _, n := range list {
			s, _ := n.(string)
			idx, ok := byName[s]
			if !ok {
				return nil, fmt.Errorf("schema: %s: %s lists unknown field %q", c.table.ID, FieldUnchanged, s)
			}
			vals[idx] = pipeline.UnchangedValue
		}
	}
	return vals, nil
}

var errDecodeType = errors.New("unexpected decoded Go type")

// fromNative turns a value as hamba decodes it generically back into the
// pipeline value of a column of type typ.
func fromNative(col *pipeline.Column, typ pipeline.Type, v any) (any, error) {
	switch typ {
	case pipeline.TypeBool:
		return v, nil
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		i, ok := asInt64(v)
		if !ok {
			return nil, errDecodeType
		}
		return i, nil
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32:
		i, ok := asInt64(v)
		if !ok || i < 0 {
			return nil, errDecodeType
		}
		return uint64(i), nil
	case pipeline.TypeUint64:
		r, ok := v.(*big.Rat)
		if !ok || !r.IsInt() || r.Sign() < 0 || !r.Num().IsUint64() {
			return nil, errDecodeType
		}
		return r.Num().Uint64(), nil
	case pipeline.TypeFloat32:
		f, ok := v.(float32)
		if !ok {
			return nil, errDecodeType
		}
		return float64(f), nil
	case pipeline.TypeFloat64:
		return v, nil
	case pipeline.TypeDecimal:
		if _, scale, fixed := decimalShape(col); fixed {
			r, ok := v.(*big.Rat)
			if !ok {
				return nil, errDecodeType
			}
			u := new(big.Int).Mul(r.Num(), pow10(scale))
			return pipeline.Decimal{Unscaled: u.Quo(u, r.Denom()), Scale: int32(scale)}, nil
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errDecodeType
		}
		scale, _ := asInt64(m["scale"])
		b, _ := m["value"].([]byte)
		return pipeline.Decimal{Unscaled: fromTwosComplement(b), Scale: int32(scale)}, nil
	case pipeline.TypeString, pipeline.TypeText, pipeline.TypeInet, pipeline.TypeMacaddr, pipeline.TypeEnum, pipeline.TypeSet:
		return v, nil
	case pipeline.TypeJSON:
		s, ok := v.(string)
		if !ok {
			return nil, errDecodeType
		}
		return pipeline.JSON(s), nil
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return v, nil
	case pipeline.TypeUUID:
		s, ok := v.(string)
		if !ok {
			return nil, errDecodeType
		}
		b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
		if err != nil || len(b) != 16 {
			return nil, fmt.Errorf("bad uuid %q", s)
		}
		return pipeline.UUID(b), nil
	case pipeline.TypeDate:
		t, ok := v.(time.Time)
		if !ok {
			return nil, errDecodeType
		}
		days := int32(t.Unix() / 86400)
		switch days {
		case maxDateDays:
			return pipeline.Date{Special: pipeline.PosInfinity}, nil
		case minDateDays:
			return pipeline.Date{Special: pipeline.NegInfinity}, nil
		}
		return pipeline.Date{Days: days}, nil
	case pipeline.TypeTime:
		d, ok := v.(time.Duration)
		if !ok {
			return nil, errDecodeType
		}
		return pipeline.TimeOfDay(d / time.Microsecond), nil
	case pipeline.TypeTimeTZ:
		s, ok := v.(string)
		if !ok {
			return nil, errDecodeType
		}
		return ParseTimeTZ(s)
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		t, ok := v.(time.Time)
		if !ok {
			return nil, errDecodeType
		}
		if typ == pipeline.TypeTimestamp {
			// hamba returns local-timestamp values as the same wall clock in
			// time.Local; read the wall clock back as UTC.
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
		}
		us := t.UnixMicro()
		switch us {
		case maxTimestampMicros:
			return pipeline.Timestamp{Special: pipeline.PosInfinity}, nil
		case minTimestampMicros:
			return pipeline.Timestamp{Special: pipeline.NegInfinity}, nil
		}
		return pipeline.Timestamp{Micros: us}, nil
	case pipeline.TypeInterval:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errDecodeType
		}
		mo, _ := asInt64(m["months"])
		d, _ := asInt64(m["days"])
		us, _ := asInt64(m["micros"])
		return pipeline.Interval{Months: int32(mo), Days: int32(d), Micros: us}, nil
	case pipeline.TypeArray:
		a, ok := v.([]any)
		if !ok {
			return nil, errDecodeType
		}
		out := make([]any, len(a))
		for i, e := range a {
			x := unionValue(e)
			if x == nil {
				continue
			}
			y, err := fromNative(col, col.Elem, x)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = y
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported type %s", typ)
}

package pipeline

import (
	"encoding/json"
	"fmt"
)

// MarshalRecord renders a record as JSON for the dead-letter queue and
// diagnostics: table, op, version, position and both images by column name.
// Values keep their full precision (decimals as strings, bytes as base64).
func MarshalRecord(r *Record) []byte {
	out := map[string]any{"op": r.Op.String(), "version": r.Version.String(), "tx_id": r.TxID}
	if !r.EventTime.IsZero() {
		out["event_time"] = r.EventTime
	}
	if json.Valid(r.Pos) {
		out["position"] = json.RawMessage(r.Pos)
	}
	if r.Table != nil {
		out["table"] = r.Table.ID.String()
		if r.Before != nil {
			out["before"] = imageJSON(r.Table, r.Before)
		}
		if r.After != nil {
			out["after"] = imageJSON(r.Table, r.After)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
	}
	return b
}

func imageJSON(t *Table, img []any) map[string]any {
	m := make(map[string]any, len(img))
	for i, v := range img {
		name := fmt.Sprintf("col%d", i)
		if i < len(t.Columns) {
			name = t.Columns[i].Name
		}
		m[name] = valueJSON(v)
	}
	return m
}

func valueJSON(v any) any {
	switch x := v.(type) {
	case Decimal:
		return x.String()
	case Unchanged:
		return map[string]bool{"unchanged": true}
	case UUID:
		return x.String()
	case Date, Timestamp, TimeOfDay:
		return fmt.Sprint(x)
	case JSON:
		return string(x)
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = valueJSON(e)
		}
		return a
	}
	return v
}

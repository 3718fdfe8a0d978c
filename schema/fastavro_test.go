package schema

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// fastavroScript decodes Confluent-framed messages with fastavro, looking the
// writer schema up by id as a consumer would, and prints each record as JSON
// in the canonical forms canonValue produces on the Go side.
const fastavroScript = `
import sys, json, io, datetime, decimal, uuid
import fastavro
decimal.getcontext().prec = 1000
def canon(v):
    if isinstance(v, dict):
        if set(v) == {"scale", "value"} and isinstance(v["value"], bytes):
            d = decimal.Decimal(int.from_bytes(v["value"], "big", signed=True)).scaleb(-v["scale"])
            return format(d, "f")
        return {k: canon(x) for k, x in v.items()}
    if isinstance(v, list):
        return [canon(x) for x in v]
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            return v.astimezone(datetime.timezone.utc).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
        return v.isoformat(timespec="microseconds")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, datetime.time):
        return v.isoformat(timespec="microseconds")
    if isinstance(v, uuid.UUID):
        return str(v)
    return v
doc = json.load(open(sys.argv[1]))
schemas = {int(k): fastavro.parse_schema(json.loads(t), named_schemas={}) for k, t in doc["schemas"].items()}
out = []
for m in doc["messages"]:
    b = bytes.fromhex(m)
    assert b[0] == 0, "magic byte"
    sid = int.from_bytes(b[1:5], "big", signed=True)
    bio = io.BytesIO(b[5:])
    rec = fastavro.schemaless_reader(bio, schemas[sid], None)
    assert bio.read() == b"", "trailing bytes"
    out.append(canon(rec))
json.dump(out, sys.stdout)
`

// canonValue renders a pipeline value the way fastavroScript renders what
// fastavro decoded.
func canonValue(col *pipeline.Column, typ pipeline.Type, v any) any {
	if v == nil {
		return nil
	}
	switch typ {
	case pipeline.TypeUint64:
		return strconv.FormatUint(v.(uint64), 10)
	case pipeline.TypeDecimal:
		d := v.(pipeline.Decimal)
		if _, scale, fixed := decimalShape(col); fixed {
			r, _ := fixedDecimal(d, 1000, scale)
			x, _ := fromNative(col, typ, r)
			return x.(pipeline.Decimal).String()
		}
		return d.String()
	case pipeline.TypeJSON:
		return string(v.(pipeline.JSON))
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		return hex.EncodeToString(v.([]byte))
	case pipeline.TypeUUID:
		return v.(pipeline.UUID).String()
	case pipeline.TypeDate:
		d := v.(pipeline.Date)
		switch d.Special {
		case pipeline.PosInfinity:
			return "9999-12-31"
		case pipeline.NegInfinity:
			return "0001-01-01"
		}
		return d.String()
	case pipeline.TypeTime:
		return v.(pipeline.TimeOfDay).String()
	case pipeline.TypeTimeTZ:
		return FormatTimeTZ(v.(pipeline.TimeTZ))
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		t := v.(pipeline.Timestamp)
		us := t.Micros
		switch t.Special {
		case pipeline.PosInfinity:
			us = maxTimestampMicros
		case pipeline.NegInfinity:
			us = minTimestampMicros
		}
		s := time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000000")
		if typ == pipeline.TypeTimestampTZ {
			s += "Z"
		}
		return s
	case pipeline.TypeInterval:
		iv := v.(pipeline.Interval)
		return map[string]any{"months": iv.Months, "days": iv.Days, "micros": iv.Micros}
	case pipeline.TypeArray:
		a := v.([]any)
		out := make([]any, len(a))
		for i, e := range a {
			out[i] = canonValue(col, col.Elem, e)
		}
		return out
	}
	return v
}

// jsonNormal makes Go and Python values comparable: both go through JSON,
// numbers kept as their text.
func jsonNormal(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFastavroDecodesFramedRecords(t *testing.T) {
	if err := exec.Command("python3", "-c", "import fastavro").Run(); err != nil {
		harness.SkipOrFail(t, fmt.Errorf("python3 with fastavro unavailable (pip install fastavro): %w", err))
	}
	// Every type, minus values Python cannot hold (24:00:00, infinities
	// and -0 of floats, which JSON cannot carry either).
	var cases []typeCase
	for _, c := range allTypeCases() {
		var keep []any
		for _, v := range c.values {
			switch x := v.(type) {
			case pipeline.TimeOfDay:
				if x == 86400e6 {
					continue
				}
			case float64:
				if math.IsInf(x, 0) || x == 0 || x != float64(float32(x)) && c.col.Type == pipeline.TypeFloat32 {
					continue
				}
			}
			keep = append(keep, v)
		}
		c.values = keep
		cases = append(cases, c)
	}
	tbl := allTypesTable(cases)
	tbl.Columns = append(tbl.Columns, pipeline.Column{Name: "big_text", Type: pipeline.TypeText})
	opts := Options{ConnectorName: "postgresql", ServerName: "srv", Unchanged: true}
	c, err := NewCodec(tbl, opts)
	if err != nil {
		t.Fatal(err)
	}
	reg := NewMemRegistry()
	ids := map[string]int{}
	schemas := map[string]string{}
	for subject, s := range map[string]avro.Schema{"v": c.ValueSchema(), "e": c.EnvelopeSchema()} {
		txt, err := SchemaText(s)
		if err != nil {
			t.Fatal(err)
		}
		id, err := reg.Register(t.Context(), subject, txt)
		if err != nil {
			t.Fatal(err)
		}
		ids[subject] = id
		schemas[strconv.Itoa(id)] = txt
	}

	var messages []string
	var want []any
	when := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for i, img := range rows(&pipeline.Table{Columns: tbl.Columns[:len(tbl.Columns)-1]}, cases) {
		img = append(img, "long text")
		if i%2 == 1 {
			img[len(img)-1] = pipeline.UnchangedValue
		}
		r := &pipeline.Record{Op: pipeline.OpUpdate, Table: tbl, After: img, Version: pipeline.Version{1, 2, 3, uint64(i)}, EventTime: when}
		b, err := c.EncodeValue(r)
		if err != nil {
			t.Fatal(err)
		}
		messages = append(messages, hex.EncodeToString(Frame(ids["v"], b)))
		rec := map[string]any{FieldOp: "u", FieldVersion: r.Version.String(), FieldDeleted: false, FieldSourceTsMs: when.UnixMilli()}
		unchanged := []any{}
		for j := range tbl.Columns {
			col := &tbl.Columns[j]
			if _, ok := img[j].(pipeline.Unchanged); ok {
				unchanged = append(unchanged, col.Name)
				rec[col.Name] = nil
				continue
			}
			rec[col.Name] = canonValue(col, col.Type, img[j])
		}
		rec[FieldUnchanged] = unchanged
		want = append(want, rec)
		if i == 0 {
			eb, err := c.EncodeEnvelope(r, SourceInfo{Version: "t", ProcessedAt: when})
			if err != nil {
				t.Fatal(err)
			}
			messages = append(messages, hex.EncodeToString(Frame(ids["e"], eb)))
			after := map[string]any{}
			for k, v := range rec {
				after[k] = v
			}
			for _, k := range []string{FieldOp, FieldVersion, FieldDeleted, FieldSourceTsMs} {
				delete(after, k)
			}
			want = append(want, map[string]any{"before": nil, "after": after, "op": "u", "ts_ms": when.UnixMilli(),
				"transaction": nil, "source": map[string]any{"version": "t", "connector": "postgresql", "name": "srv",
					"ts_ms": when.UnixMilli(), "snapshot": "false", "db": "shop", "sequence": nil, "schema": "public",
					"table": "all_types", "txId": nil, "lsn": nil, "xmin": nil}})
		}
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "messages.json")
	doc, _ := json.Marshal(map[string]any{"schemas": schemas, "messages": messages})
	if err := os.WriteFile(in, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "decode.py")
	if err := os.WriteFile(script, []byte(fastavroScript), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("python3", script, in)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fastavro: %v\n%s", err, stderr.String())
	}
	got := jsonNormal(t, json.RawMessage(out)).([]any)
	wantN := jsonNormal(t, want).([]any)
	if len(got) != len(wantN) {
		t.Fatalf("fastavro decoded %d records, want %d", len(got), len(wantN))
	}
	for i := range wantN {
		if !reflect.DeepEqual(got[i], wantN[i]) {
			g, w := got[i].(map[string]any), wantN[i].(map[string]any)
			for k := range w {
				if !reflect.DeepEqual(g[k], w[k]) {
					t.Errorf("record %d field %s: fastavro %s, want %s", i, k, fmt.Sprint(g[k]), fmt.Sprint(w[k]))
				}
			}
			if len(g) != len(w) {
				t.Errorf("record %d: %d fields, want %d", i, len(g), len(w))
			}
		}
	}
}

package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/sluice-cdc/sluice/pipeline"
)

// randValue returns a value for a column of type typ: mostly valid, with
// edge cases, and now and then one the encoder must reject.
func randValue(rng *rand.Rand, col *pipeline.Column, typ pipeline.Type) any {
	if rng.IntN(40) == 0 { // wrong Go type
		return []any{"x", 1.5, int64(3), struct{}{}, pipeline.JSON("{}")}[rng.IntN(5)]
	}
	pick := func(vs ...any) any { return vs[rng.IntN(len(vs))] }
	switch typ {
	case pipeline.TypeBool:
		return rng.IntN(2) == 0
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		switch rng.IntN(6) {
		case 0:
			return pick(int64(math.MinInt16), int64(math.MaxInt16), int64(math.MinInt32), int64(math.MaxInt32),
				int64(math.MinInt64), int64(math.MaxInt64), int64(0), int64(-1), int64(math.MaxInt16+1), int64(math.MinInt32-1))
		case 1:
			return pick(int(rng.Int32()), int32(rng.Int32()), int16(rng.Int32()), int8(rng.Int32()))
		case 2:
			return int64(rng.Uint64())
		}
		return int64(rng.Int32N(1<<20)) - 1<<19
	case pipeline.TypeUint8, pipeline.TypeUint16, pipeline.TypeUint32, pipeline.TypeUint64:
		switch rng.IntN(5) {
		case 0:
			return pick(uint64(0), uint64(math.MaxUint8), uint64(math.MaxUint16), uint64(math.MaxUint32), uint64(math.MaxUint64),
				uint64(1<<63), uint64(1<<63-1), uint64(127), uint64(128), uint64(255), uint64(256), uint64(math.MaxUint8+1))
		case 1:
			return pick(uint(rng.Uint32()), uint32(rng.Uint32()), uint16(rng.Uint32()), uint8(rng.Uint32()))
		case 2:
			return rng.Uint64() >> rng.IntN(64)
		}
		return uint64(rng.IntN(70000))
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		switch rng.IntN(5) {
		case 0:
			return pick(math.Inf(1), math.Inf(-1), math.NaN(), math.Copysign(0, -1), 0.0, math.MaxFloat64, math.SmallestNonzeroFloat64)
		case 1:
			return float32(rng.NormFloat64())
		}
		return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
	case pipeline.TypeDecimal:
		return randDecimal(rng)
	case pipeline.TypeString, pipeline.TypeText, pipeline.TypeInet, pipeline.TypeMacaddr, pipeline.TypeEnum, pipeline.TypeSet:
		return randString(rng)
	case pipeline.TypeJSON:
		if rng.IntN(2) == 0 {
			return pipeline.JSON(randString(rng))
		}
		return randString(rng)
	case pipeline.TypeBytes, pipeline.TypeBit, pipeline.TypeGeometry:
		b := make([]byte, rng.IntN(300))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	case pipeline.TypeUUID:
		var u pipeline.UUID
		for i := range u {
			u[i] = byte(rng.Uint32())
		}
		if rng.IntN(3) == 0 {
			return [16]byte(u)
		}
		return u
	case pipeline.TypeDate:
		switch rng.IntN(8) {
		case 0:
			return pipeline.Date{Special: pick(pipeline.PosInfinity, pipeline.NegInfinity, pipeline.NaN).(pipeline.Special)}
		case 1:
			return pipeline.Date{Days: rng.Int32() - math.MaxInt32/2}
		}
		return pipeline.Date{Days: rng.Int32N(100000) - 50000}
	case pipeline.TypeTime:
		if rng.IntN(8) == 0 {
			return pipeline.TimeOfDay(pick(int64(-1), int64(86400e6), int64(86400e6+1), int64(0)).(int64))
		}
		return pipeline.TimeOfDay(rng.Int64N(86400e6))
	case pipeline.TypeTimeTZ:
		t := pipeline.TimeTZ{Micros: rng.Int64N(86400e6 + 1), OffsetSec: rng.Int32N(2*14*3600+1) - 14*3600}
		switch rng.IntN(10) {
		case 0:
			t.OffsetSec = pick(int32(math.MinInt32), int32(math.MaxInt32), int32(100*3600), int32(-100*3600), int32(99*3600+59*60+59), int32(-1), int32(0)).(int32)
		case 1:
			t.Micros = pick(int64(-1), int64(86400e6+1), int64(86400e6), int64(0)).(int64)
		case 2:
			t.OffsetSec -= t.OffsetSec % 60
		}
		return t
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		switch rng.IntN(8) {
		case 0:
			return pipeline.Timestamp{Special: pick(pipeline.PosInfinity, pipeline.NegInfinity, pipeline.NaN).(pipeline.Special)}
		case 1:
			loc := time.FixedZone("x", int(rng.Int32N(50000))-25000)
			return time.UnixMicro(rng.Int64N(1<<50) - 1<<49).In(loc)
		case 2:
			return pipeline.Timestamp{Micros: int64(rng.Uint64())}
		}
		return pipeline.Timestamp{Micros: rng.Int64N(1<<52) - 1<<51}
	case pipeline.TypeInterval:
		return pipeline.Interval{Months: rng.Int32() - math.MaxInt32/2, Days: rng.Int32N(1000) - 500, Micros: int64(rng.Uint64())}
	case pipeline.TypeArray:
		n := rng.IntN(12)
		if rng.IntN(6) == 0 {
			n = rng.IntN(320) // several blocks
		}
		a := make([]any, n)
		for i := range a {
			switch rng.IntN(12) {
			case 0:
				a[i] = nil
			case 1:
				if rng.IntN(20) == 0 {
					a[i] = []any{int64(1)} // nested: an error
					continue
				}
				fallthrough
			default:
				a[i] = randValue(rng, col, col.Elem)
			}
		}
		return a
	}
	panic(typ)
}

func randString(rng *rand.Rand) string {
	var sb strings.Builder
	n := rng.IntN(40)
	if rng.IntN(10) == 0 {
		n = rng.IntN(400)
	}
	for range n {
		switch rng.IntN(6) {
		case 0:
			sb.WriteRune(rune(rng.IntN(0x10000)))
		case 1:
			sb.WriteByte(byte(rng.Uint32())) // possibly invalid UTF-8
		default:
			sb.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	return sb.String()
}

func randDecimal(rng *rand.Rand) pipeline.Decimal {
	switch rng.IntN(12) {
	case 0:
		return pipeline.Decimal{Special: []pipeline.Special{pipeline.NaN, pipeline.PosInfinity, pipeline.NegInfinity}[rng.IntN(3)]}
	case 1:
		return pipeline.Decimal{Scale: int32(rng.IntN(6))} // nil Unscaled
	case 2: // big: beyond int64
		u := new(big.Int).Lsh(big.NewInt(rng.Int64N(1<<40)+1), uint(50+rng.IntN(100)))
		if rng.IntN(2) == 0 {
			u.Neg(u)
		}
		return pipeline.Decimal{Unscaled: u, Scale: int32(rng.IntN(40) - 5)}
	case 3: // powers of two and int64 edges: hamba's non-minimal negative form
		var x int64
		switch rng.IntN(3) {
		case 0:
			x = -(int64(1) << rng.IntN(63))
		case 1:
			x = int64(1)<<rng.IntN(63) - int64(rng.IntN(2))
		default:
			x = []int64{math.MinInt64, math.MaxInt64, -1, 0, 127, 128, -128, -129, 255, 256, -32768}[rng.IntN(11)]
		}
		return pipeline.Decimal{Unscaled: big.NewInt(x), Scale: int32(rng.IntN(6))}
	case 4: // trailing zeros beyond the column's scale
		return pipeline.Decimal{Unscaled: new(big.Int).Mul(big.NewInt(rng.Int64N(1e6)-5e5), pow10(rng.IntN(25))), Scale: int32(rng.IntN(25))}
	}
	d, _ := pipeline.ParseDecimal(fmt.Sprintf("%d.%0*d", rng.Int64N(2e12)-1e12, rng.IntN(4)+1, rng.IntN(1000)))
	if rng.IntN(5) == 0 {
		d.Scale -= int32(rng.IntN(3))
	}
	return d
}

// equivTables are the shapes the comparison covers: every type (NOT NULL
// and nullable), decimals at the fast-path boundaries, and one table wide
// enough that __sluice_unchanged spans several blocks.
func equivTables() []*pipeline.Table {
	tbl := allTypesTable(allTypeCases())
	for _, d := range [][2]int{{18, 0}, {19, 0}, {20, 4}, {2, 5}, {5, -2}, {12, 2}, {1, 0}, {38, 18}} {
		for _, nullable := range []bool{false, true} {
			tbl.Columns = append(tbl.Columns, pipeline.Column{Name: fmt.Sprintf("d_%d_%d_%v", d[0], d[1]+2, nullable),
				Type: pipeline.TypeDecimal, Precision: d[0], Scale: d[1], Nullable: nullable})
		}
	}
	tbl.Columns = append(tbl.Columns, pipeline.Column{Name: "u64_key", Type: pipeline.TypeUint64, Key: true},
		pipeline.Column{Name: "txt_key", Type: pipeline.TypeText, Key: true, Nullable: true})
	tbl.KeyIdx = []int{0, len(tbl.Columns) - 1, len(tbl.Columns) - 2}

	wide := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "wide"}, KeyIdx: []int{0},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt32, Key: true}}}
	for i := range 230 {
		wide.Columns = append(wide.Columns, pipeline.Column{Name: fmt.Sprintf("c%03d", i), Type: pipeline.TypeText, Nullable: i%3 == 0})
	}
	nokey := &pipeline.Table{ID: pipeline.TableID{Table: "nokey"}, Columns: []pipeline.Column{
		{Name: "a", Type: pipeline.TypeText}, {Name: "b-é", Type: pipeline.TypeInterval, Nullable: true}}}
	return []*pipeline.Table{tbl, wide, nokey, benchTable()}
}

// randImage builds a row image for c's shape. A clean image holds only
// values the reference converters accept (NULL only where allowed,
// unchanged only where representable); otherwise anything goes.
func randImage(rng *rand.Rand, c *Codec, clean, before bool, unchangedRate int) []any {
	tbl := c.Table()
	img := make([]any, len(tbl.Columns))
	for i := range img {
		p := &c.rowPlan[i]
		col := p.col
		switch {
		case rng.IntN(unchangedRate) == 0 && (!clean || (p.nullable && !col.Key && c.opts.Unchanged && !before)):
			img[i] = pipeline.UnchangedValue
		case rng.IntN(6) == 0 && (col.Nullable || before || (!clean && rng.IntN(25) == 0)):
			img[i] = nil
		default:
			for try := 0; ; try++ {
				img[i] = randValue(rng, col, col.Type)
				if !clean || try == 100 {
					break
				}
				if _, err := p.conv(img[i]); err == nil {
					break
				}
			}
		}
	}
	if !clean && rng.IntN(50) == 0 {
		img = img[:len(img)-1]
	}
	return img
}

func randSource(rng *rand.Rand) SourceInfo {
	str := func() string {
		if rng.IntN(2) == 0 {
			return ""
		}
		return randString(rng)
	}
	ptr := func() *int64 {
		if rng.IntN(2) == 0 {
			return nil
		}
		v := int64(rng.Uint64())
		return &v
	}
	s := SourceInfo{Version: str(), Connector: str(), Name: str(), Snapshot: str(), DB: str(), Schema: str(), Table: str(),
		TxID: ptr(), LSN: ptr(), Xmin: ptr(), ProcessedAt: time.UnixMilli(rng.Int64N(1 << 42))}
	if rng.IntN(2) == 0 {
		s.TsMs = int64(rng.Uint64())
	}
	if rng.IntN(2) == 0 {
		q := randString(rng)
		s.Sequence = &q
	}
	if rng.IntN(2) == 0 {
		s.Transaction = &Transaction{ID: randString(rng), TotalOrder: int64(rng.Uint64()), DataCollectionOrder: rng.Int64N(100)}
	}
	return s
}

// sameResult fails unless two encodings agree byte for byte, or fail with
// the same error.
func sameResult(t *testing.T, what string, got []byte, gotErr error, want []byte, wantErr error) bool {
	t.Helper()
	switch {
	case (gotErr == nil) != (wantErr == nil):
		t.Errorf("%s: error %v, reference %v", what, gotErr, wantErr)
		return false
	case gotErr != nil:
		if gotErr.Error() != wantErr.Error() || errors.Is(gotErr, ErrNotRepresentable) != errors.Is(wantErr, ErrNotRepresentable) ||
			errors.Is(gotErr, ErrNoRow) != errors.Is(wantErr, ErrNoRow) || errors.Is(gotErr, ErrNoKey) != errors.Is(wantErr, ErrNoKey) {
			t.Errorf("%s: error %q, reference %q", what, gotErr, wantErr)
			return false
		}
		var ge, we *EncodeError
		if errors.As(gotErr, &ge) != errors.As(wantErr, &we) {
			t.Errorf("%s: EncodeError %v, reference %v", what, ge, we)
			return false
		}
		return true
	case !bytes.Equal(got, want):
		t.Errorf("%s: bytes differ\n got %x\nwant %x", what, got, want)
		return false
	}
	return true
}

// registered parses the schema a registry would hand a consumer.
func registered(t *testing.T, reg *MemRegistry, subject string, s avro.Schema) avro.Schema {
	t.Helper()
	txt, err := SchemaText(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(t.Context(), subject, txt); err != nil {
		t.Fatal(err)
	}
	p, err := ParseSchemaText(txt)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// decodesExactly checks that hamba reads one whole record of s from b.
func decodesExactly(t *testing.T, what string, s avro.Schema, b []byte) {
	t.Helper()
	dec := avro.Config{}.Freeze().NewDecoder(s, bytes.NewReader(b))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Errorf("%s: hamba decode: %v", what, err)
		return
	}
	if err := dec.Decode(&m); !errors.Is(err, io.EOF) {
		t.Errorf("%s: trailing bytes after the record (%v)", what, err)
	}
}

// The direct writer produces exactly the bytes (and errors) of the generic
// map-based hamba path it replaced, for every type, NULLs, unchanged
// values, deletes' zero fallback, envelopes with every source field.
func TestDirectWriterMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 1500
	if testing.Short() {
		n = 300
	}
	ops := []pipeline.Op{pipeline.OpInsert, pipeline.OpUpdate, pipeline.OpDelete, pipeline.OpRead, pipeline.OpTruncate, pipeline.OpHeartbeat}
	for _, tbl := range equivTables() {
		for _, opts := range []Options{
			{ConnectorName: "postgresql", ServerName: "srv"},
			{ServerName: "srv", Unchanged: true},
			{ConnectorName: "my-sql", Unchanged: true},
		} {
			c, err := NewCodec(tbl, opts)
			if err != nil {
				t.Fatal(err)
			}
			reg := NewMemRegistry()
			var keyS avro.Schema
			if c.KeySchema() != nil {
				keyS = registered(t, reg, "k", c.KeySchema())
			}
			valS := registered(t, reg, "v", c.ValueSchema())
			envS := registered(t, reg, "e", c.EnvelopeSchema())
			ok, failed := 0, 0
			for i := range n {
				unchangedRate := 1 << 30
				if opts.Unchanged || rng.IntN(20) == 0 {
					unchangedRate = 2 + rng.IntN(8)
				}
				r := &pipeline.Record{Op: ops[rng.IntN(len(ops))], Table: tbl, Version: pipeline.Version{rng.Uint64(), rng.Uint64(), 0, uint64(i)},
					TxID: rng.Uint64() >> rng.IntN(2)}
				if rng.IntN(4) != 0 {
					r.EventTime = time.UnixMicro(rng.Int64N(1 << 52))
				}
				clean := rng.IntN(3) != 0
				switch r.Op {
				case pipeline.OpInsert, pipeline.OpRead:
					r.After = randImage(rng, c, clean, false, unchangedRate)
				case pipeline.OpUpdate:
					r.After = randImage(rng, c, clean, false, unchangedRate)
					if rng.IntN(2) == 0 {
						r.Before = randImage(rng, c, clean, true, 1<<30)
					}
				case pipeline.OpDelete:
					r.Before = randImage(rng, c, clean, true, 1<<30)
					if rng.IntN(2) == 0 { // key-only old tuple
						for j := range r.Before {
							if !tbl.Columns[j].Key {
								r.Before[j] = nil
							}
						}
					}
				}
				if rng.IntN(100) == 0 {
					other := *tbl
					r.Table = &other
				}
				what := fmt.Sprintf("%s %+v record %d (%s)", tbl.ID, opts, i, r.Op)

				kb, kerr := c.EncodeKey(r)
				rkb, rkerr := c.refEncodeKey(r)
				if sameResult(t, what+" key", kb, kerr, rkb, rkerr) && kerr == nil {
					decodesExactly(t, what+" key", keyS, kb)
				}
				vb, verr := c.EncodeValue(r)
				rvb, rverr := c.refEncodeValue(r)
				if sameResult(t, what+" value", vb, verr, rvb, rverr) && verr == nil {
					decodesExactly(t, what+" value", valS, vb)
				}
				src := randSource(rng)
				eb, eerr := c.EncodeEnvelope(r, src)
				reb, reerr := c.refEncodeEnvelope(r, src)
				if sameResult(t, what+" envelope", eb, eerr, reb, reerr) && eerr == nil {
					decodesExactly(t, what+" envelope", envS, eb)
					ok++
				} else {
					failed++
				}
				if t.Failed() {
					t.FailNow()
				}
			}
			// The corpus must exercise both outcomes.
			t.Logf("%s %+v: %d envelopes encoded, %d failed", tbl.ID, opts, ok, failed)
			if ok < n/3 || failed < n/20 {
				t.Errorf("%s %+v: %d envelopes encoded, %d failed", tbl.ID, opts, ok, failed)
			}
		}
	}
}

func TestAppendTimeTZMatchesFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20000 {
		tz := pipeline.TimeTZ{Micros: rng.Int64N(86400e6 + 1), OffsetSec: rng.Int32N(200*3600) - 100*3600}
		if i < 4 {
			tz.OffsetSec = []int32{math.MinInt32, math.MaxInt32, 100 * 3600, -(100*3600 - 1)}[i]
		}
		want := appendString(nil, FormatTimeTZ(tz))
		if got := appendTimeTZ(nil, tz); !bytes.Equal(got, want) {
			t.Fatalf("%+v: %q, want %q", tz, got, want)
		}
	}
}

// The benchmark's shape meets the target's allocation budget.
func TestEncodeAllocations(t *testing.T) {
	tbl := benchTable()
	c, err := NewCodec(tbl, Options{ConnectorName: "postgresql", ServerName: "srv"})
	if err != nil {
		t.Fatal(err)
	}
	r, src := benchRecord(tbl), benchSource()
	for name, f := range map[string]func(){
		"envelope": func() { _, _ = c.EncodeEnvelope(r, src) },
		"value":    func() { _, _ = c.EncodeValue(r) },
		"key":      func() { _, _ = c.EncodeKey(r) },
	} {
		if n := testing.AllocsPerRun(200, f); n > 1 {
			t.Errorf("%s: %.1f allocations per record, want 1 (the result)", name, n)
		}
	}
}

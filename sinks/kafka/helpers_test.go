package kafka

import (
	"context"
	"errors"
	"math/big"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/schema/schematest"
)

// registryFor returns the registry a broker test writes schemas to — the
// srclient-backed client of schema.NewSRClient — and the server behind it,
// whose MemRegistry answers lookups by id. The server is the Confluent-API
// double of schematest; a real registry started by the integration harness
// would replace it here, and only here, since the tests reach it solely
// through schema.Registry and lookups by id.
func registryFor(t *testing.T) (schema.Registry, *schematest.Registry) {
	srv := schematest.New(t)
	return schema.NewSRClient(srv.URL, schema.SRClientOptions{Timeout: 10 * time.Second}), srv
}

// openSink builds and opens a sink on k with the defaults, changed by mod.
func openSink(t *testing.T, k *harness.Kafka, reg schema.Registry, mod func(*Options)) *Sink {
	t.Helper()
	o := Defaults(k.Brokers(), "srv")
	o.Producer.DeliveryTimeout = 20 * time.Second
	if mod != nil {
		mod(&o)
	}
	s, err := New(o, reg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// readTopic returns every record of topic up to its current end offsets,
// in partition then offset order.
func readTopic(t *testing.T, k *harness.Kafka, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	want := endOffsets(t, k, topic)
	total := int64(0)
	for _, n := range want {
		total += n
	}
	if total == 0 {
		return nil
	}
	cl, err := k.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	byPart := map[int32][]*kgo.Record{}
	got := int64(0)
	for got < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("topic %s: read %d of %d records", topic, got, total)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < want[r.Partition] {
				byPart[r.Partition] = append(byPart[r.Partition], r)
				got++
			}
		})
	}
	var out []*kgo.Record
	for p := int32(0); p < int32(len(want)); p++ {
		out = append(out, byPart[p]...)
	}
	return out
}

// endOffsets returns the end offset of every partition of topic (none for
// a topic that does not exist).
func endOffsets(t *testing.T, k *harness.Kafka, topic string) map[int32]int64 {
	t.Helper()
	cl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return
		}
		if o.Err != nil {
			t.Fatalf("end offset %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out
}

func decimal(s string) pipeline.Decimal {
	d, err := pipeline.ParseDecimal(s)
	if err != nil {
		panic(err)
	}
	return d
}

// everyType is a table with a column of every pipeline.Type (nullable),
// keyed by id.
var everyType = &pipeline.Table{
	ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "every_type"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "c_text", Type: pipeline.TypeText, Nullable: true},
		{Name: "c_bool", Type: pipeline.TypeBool, Nullable: true},
		{Name: "c_int16", Type: pipeline.TypeInt16, Nullable: true},
		{Name: "c_int32", Type: pipeline.TypeInt32, Nullable: true},
		{Name: "c_int64", Type: pipeline.TypeInt64, Nullable: true},
		{Name: "c_uint8", Type: pipeline.TypeUint8, Nullable: true},
		{Name: "c_uint16", Type: pipeline.TypeUint16, Nullable: true},
		{Name: "c_uint32", Type: pipeline.TypeUint32, Nullable: true},
		{Name: "c_uint64", Type: pipeline.TypeUint64, Nullable: true},
		{Name: "c_float32", Type: pipeline.TypeFloat32, Nullable: true},
		{Name: "c_float64", Type: pipeline.TypeFloat64, Nullable: true},
		{Name: "c_decimal", Type: pipeline.TypeDecimal, Precision: 12, Scale: 3, Nullable: true},
		{Name: "c_numeric", Type: pipeline.TypeDecimal, Scale: -1, Nullable: true},
		{Name: "c_string", Type: pipeline.TypeString, Nullable: true},
		{Name: "c_bytes", Type: pipeline.TypeBytes, Nullable: true},
		{Name: "c_uuid", Type: pipeline.TypeUUID, Nullable: true},
		{Name: "c_json", Type: pipeline.TypeJSON, Nullable: true},
		{Name: "c_date", Type: pipeline.TypeDate, Nullable: true},
		{Name: "c_time", Type: pipeline.TypeTime, Nullable: true},
		{Name: "c_timetz", Type: pipeline.TypeTimeTZ, Nullable: true},
		{Name: "c_timestamp", Type: pipeline.TypeTimestamp, Nullable: true},
		{Name: "c_timestamptz", Type: pipeline.TypeTimestampTZ, Nullable: true},
		{Name: "c_interval", Type: pipeline.TypeInterval, Nullable: true},
		{Name: "c_inet", Type: pipeline.TypeInet, Nullable: true},
		{Name: "c_macaddr", Type: pipeline.TypeMacaddr, Nullable: true},
		{Name: "c_enum", Type: pipeline.TypeEnum, Enum: []string{"red", "green"}, Nullable: true},
		{Name: "c_set", Type: pipeline.TypeSet, Enum: []string{"a", "b"}, Nullable: true},
		{Name: "c_bit", Type: pipeline.TypeBit, Nullable: true},
		{Name: "c_geometry", Type: pipeline.TypeGeometry, Nullable: true},
		{Name: "c_array", Type: pipeline.TypeArray, Elem: pipeline.TypeString, Nullable: true},
	},
	KeyIdx:     []int{0},
	Generation: 1,
}

// everyRow is row n of everyType; seed varies the non-key values, and every
// seventh row has NULLs in the odd columns.
func everyRow(id int64, seed int64) []any {
	s := seed
	row := []any{
		id, "txt-" + big.NewInt(s).String(), s%2 == 0, -s % 32768, s * 1000, s << 33, uint64(s % 256), uint64(s % 65536),
		uint64(4_000_000_000 + s), uint64(1<<63) + uint64(s), float64(float32(s) / 4), float64(s) / 3,
		pipeline.Decimal{Unscaled: big.NewInt(s*1000 + 123), Scale: 3}, decimal("-3.14159265358979323846"),
		"héllo ✓ " + big.NewInt(s).String(), []byte{0, byte(s), 0xff},
		pipeline.UUID{1, 2, 3, byte(s)}, pipeline.JSON(`{"n":` + big.NewInt(s).String() + `,"a":[1,null]}`),
		pipeline.Date{Days: int32(19000 + s)}, pipeline.TimeOfDay(s * 1_000_001), pipeline.TimeTZ{Micros: s * 1000, OffsetSec: 19800},
		pipeline.Timestamp{Micros: 1_700_000_000_000_000 + s}, pipeline.Timestamp{Micros: -86_400_000_000 * s},
		pipeline.Interval{Months: int32(s), Days: -2, Micros: 3_600_000_000}, "10.0.0.1/8", "08:00:2b:01:02:03",
		"green", "a,b", []byte{0xa5}, []byte{1, 1, 0, 0, 0}, []any{"x", nil, "ü"},
	}
	if id%7 == 0 {
		for i := 1; i < len(row); i += 2 {
			row[i] = nil
		}
	}
	return row
}

// registryView inspects the registry a test's sink writes to: the
// schematest double (memView) or a real registry over REST (restRegistry).
type registryView interface {
	schema(t *testing.T, id int) string
	subjects(t *testing.T, prefix string) []string
	versionIDs(t *testing.T, subject string) []int
	level(t *testing.T, subject string) string
	// same compares a registered schema text with the codec's.
	same(registered, want string) bool
	// client is a fresh registry client, as a restarted process has.
	client() schema.Registry
}

// memView inspects the schematest double directly.
type memView struct{ srv *schematest.Registry }

func (m memView) schema(t *testing.T, id int) string {
	t.Helper()
	s, ok := m.srv.Mem.Schema(id)
	if !ok {
		t.Fatalf("schema id %d is not registered", id)
	}
	return s
}

func (m memView) subjects(_ *testing.T, prefix string) []string {
	var out []string
	for _, s := range m.srv.Mem.Subjects() {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func (m memView) versionIDs(_ *testing.T, subject string) []int { return m.srv.Mem.Versions(subject) }
func (m memView) level(_ *testing.T, subject string) string     { return m.srv.Level(subject) }
func (m memView) same(registered, want string) bool             { return registered == want }
func (m memView) client() schema.Registry {
	return schema.NewSRClient(m.srv.URL, schema.SRClientOptions{Timeout: 10 * time.Second})
}

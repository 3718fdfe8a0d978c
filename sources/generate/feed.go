package generate

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Indexes of the fixed tables, in the order Options.Tables enables them.
const (
	customers = iota
	orders
	events
)

// epoch is the event time of change 0; change n happens n milliseconds later.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Tables returns the shapes of the tables the feed of opts writes.
func Tables(opts Options) []*pipeline.Table {
	opts = opts.withDefaults()
	db := opts.Database
	all := []*pipeline.Table{
		{
			ID: pipeline.TableID{Database: db, Schema: "demo", Table: "customers"},
			Columns: []pipeline.Column{
				{Name: "id", Type: pipeline.TypeInt64, Key: true, SourceType: "bigint"},
				{Name: "name", Type: pipeline.TypeString, Nullable: true, SourceType: "text"},
				{Name: "email", Type: pipeline.TypeString, Nullable: true, SourceType: "text"},
				{Name: "balance", Type: pipeline.TypeDecimal, Precision: 12, Scale: 2, Nullable: true, SourceType: "numeric(12,2)"},
				{Name: "created_at", Type: pipeline.TypeTimestampTZ, Nullable: true, SourceType: "timestamptz"},
				{Name: "vip", Type: pipeline.TypeBool, Nullable: true, SourceType: "boolean"},
			},
			KeyIdx: []int{0}, Generation: 1,
		},
		{
			ID: pipeline.TableID{Database: db, Schema: "demo", Table: "orders"},
			Columns: []pipeline.Column{
				{Name: "id", Type: pipeline.TypeInt64, Key: true, SourceType: "bigint"},
				{Name: "customer_id", Type: pipeline.TypeInt64, Nullable: true, SourceType: "bigint"},
				{Name: "amount", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2, Nullable: true, SourceType: "numeric(10,2)"},
				{Name: "status", Type: pipeline.TypeEnum, Enum: statuses, Nullable: true, SourceType: "order_status"},
				{Name: "placed_on", Type: pipeline.TypeDate, Nullable: true, SourceType: "date"},
				{Name: "tags", Type: pipeline.TypeArray, Elem: pipeline.TypeString, Nullable: true, SourceType: "text[]"},
				{Name: "payload", Type: pipeline.TypeJSON, Nullable: true, SourceType: "jsonb"},
			},
			KeyIdx: []int{0}, Generation: 1,
		},
		{
			ID: pipeline.TableID{Database: db, Schema: "demo", Table: "events"},
			Columns: []pipeline.Column{
				{Name: "id", Type: pipeline.TypeUUID, Key: true, SourceType: "uuid"},
				{Name: "kind", Type: pipeline.TypeString, Nullable: true, SourceType: "text"},
				{Name: "at", Type: pipeline.TypeTimestamp, Nullable: true, SourceType: "timestamp"},
				{Name: "data", Type: pipeline.TypeBytes, Nullable: true, SourceType: "bytea"},
				{Name: "score", Type: pipeline.TypeFloat64, Nullable: true, SourceType: "double precision"},
			},
			KeyIdx: []int{0}, Generation: 1,
		},
	}
	return all[:opts.Tables]
}

var (
	statuses  = []string{"pending", "paid", "shipped"}
	firsts    = []string{"ada", "alan", "grace", "edsger", "barbara", "ken", "dennis", "margaret"}
	kinds     = []string{"click", "view", "signup", "purchase", "logout"}
	tagValues = []string{"gift", "express", "fragile", "bulk", "promo"}
)

// step is one change of the feed, decided without its row values.
type step struct {
	seq   int64
	table int
	op    pipeline.Op
	id    int64 // the row's counter: its id (or the seed of its UUID)
}

// state is the feed's key space after some changes: which rows are live
// and which change last wrote each of them. Walking it needs no row
// values, so regenerating it up to any sequence number is cheap.
type state struct {
	opts Options
	seq  int64 // changes decided so far
	next []int64
	live []liveSet
}

type liveSet struct {
	ids  []int64
	pos  map[int64]int   // id → index in ids
	last map[int64]int64 // id → seq of the change that last wrote it
}

func newState(opts Options) *state {
	st := &state{opts: opts, next: make([]int64, opts.Tables), live: make([]liveSet, opts.Tables)}
	for i := range st.live {
		st.live[i] = liveSet{pos: map[int64]int{}, last: map[int64]int64{}}
	}
	return st
}

// initial is the number of initial-row changes.
func (st *state) initial() int64 { return int64(st.opts.InitialRows) * int64(st.opts.Tables) }

// total is the number of changes of a bounded feed, -1 when unbounded.
func (st *state) total() int64 {
	if st.opts.Changes <= 0 {
		return -1
	}
	return st.initial() + st.opts.Changes
}

// advance decides change seq+1 and applies it to the key space.
func (st *state) advance() step {
	st.seq++
	n := st.seq
	s := step{seq: n}
	if n <= st.initial() {
		s.table, s.op = int((n-1)%int64(st.opts.Tables)), pipeline.OpInsert
	} else {
		rng := rand.New(rand.NewPCG(uint64(st.opts.Seed), uint64(n)<<1))
		s.table = rng.IntN(st.opts.Tables)
		m := st.opts.Mix
		switch r := rng.IntN(m.Insert + m.Update + m.Delete); {
		case r < m.Insert || len(st.live[s.table].ids) == 0:
			s.op = pipeline.OpInsert
		case r < m.Insert+m.Update:
			s.op = pipeline.OpUpdate
		default:
			s.op = pipeline.OpDelete
		}
		if s.op != pipeline.OpInsert {
			ls := &st.live[s.table]
			s.id = ls.ids[rng.IntN(len(ls.ids))]
		}
	}
	ls := &st.live[s.table]
	switch s.op {
	case pipeline.OpInsert:
		st.next[s.table]++
		s.id = st.next[s.table]
		ls.pos[s.id] = len(ls.ids)
		ls.ids = append(ls.ids, s.id)
		ls.last[s.id] = n
	case pipeline.OpUpdate:
		ls.last[s.id] = n
	case pipeline.OpDelete:
		i := ls.pos[s.id]
		end := ls.ids[len(ls.ids)-1]
		ls.ids[i], ls.pos[end] = end, i
		ls.ids = ls.ids[:len(ls.ids)-1]
		delete(ls.pos, s.id)
		delete(ls.last, s.id)
	}
	return s
}

// keyOf is the key value of row id in table t.
func (st *state) keyOf(t int, id int64) any {
	if t != events {
		return id
	}
	var u pipeline.UUID
	r := rand.New(rand.NewPCG(uint64(st.opts.Seed)^0x9e3779b97f4a7c15, uint64(id)))
	for i := 0; i < 16; i += 8 {
		x := r.Uint64()
		for j := 0; j < 8; j++ {
			u[i+j] = byte(x >> (8 * j))
		}
	}
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u
}

// row is the full image table t's row id has after change seq wrote it.
func (st *state) row(t int, id, seq int64) []any {
	r := rand.New(rand.NewPCG(uint64(st.opts.Seed), uint64(seq)<<1|1))
	at := epoch.Add(time.Duration(seq) * time.Millisecond)
	key := st.keyOf(t, id)
	switch t {
	case customers:
		name := firsts[r.IntN(len(firsts))] + " " + strconv.FormatInt(id, 10)
		return []any{key, name, fmt.Sprintf("user%d@example.com", id),
			pipeline.Decimal{Unscaled: big.NewInt(r.Int64N(2e11) - 1e11), Scale: 2},
			pipeline.TimestampOf(at.Add(-time.Duration(r.Int64N(1e6)) * time.Second)), r.IntN(10) == 0}
	case orders:
		tags := make([]any, r.IntN(3))
		for i := range tags {
			tags[i] = tagValues[r.IntN(len(tagValues))]
		}
		// Any customer id the feed may have reached by now; a pure function
		// of seq, so regenerating the row gives the same value.
		customer := 1 + r.Int64N(int64(st.opts.InitialRows)+seq/int64(st.opts.Tables)+1)
		return []any{key, customer, pipeline.Decimal{Unscaled: big.NewInt(r.Int64N(1e9)), Scale: 2},
			statuses[r.IntN(len(statuses))], pipeline.DateOf(at.AddDate(0, 0, -r.IntN(30))), tags,
			pipeline.JSON(fmt.Sprintf(`{"items":%d,"gift":%t,"note":"seq %d"}`, 1+r.IntN(9), r.IntN(4) == 0, seq))}
	default:
		data := make([]byte, r.IntN(24))
		for i := range data {
			data[i] = byte(r.UintN(256))
		}
		return []any{key, kinds[r.IntN(len(kinds))], pipeline.TimestampOf(at), data, float64(r.IntN(1e6)) / 1024}
	}
}

package sinktest

import (
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"slices"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Accounts and Items are the typed tables of the generated change log.
var (
	Accounts = &pipeline.Table{
		ID: pipeline.TableID{Database: "conf", Schema: "conf", Table: "accounts"},
		Columns: []pipeline.Column{
			{Name: "id", Type: pipeline.TypeInt64, Key: true},
			{Name: "name", Type: pipeline.TypeString, Nullable: true},
			{Name: "balance", Type: pipeline.TypeDecimal, Precision: 12, Scale: 2, Nullable: true},
			{Name: "seen", Type: pipeline.TypeTimestampTZ, Nullable: true},
			{Name: "active", Type: pipeline.TypeBool, Nullable: true},
			{Name: "note", Type: pipeline.TypeString, Nullable: true},
			{Name: "tags", Type: pipeline.TypeArray, Elem: pipeline.TypeString, Nullable: true},
		},
		KeyIdx:     []int{0},
		Generation: 1,
	}
	Items = &pipeline.Table{
		ID: pipeline.TableID{Database: "conf", Schema: "conf", Table: "items"},
		Columns: []pipeline.Column{
			{Name: "region", Type: pipeline.TypeString, Key: true},
			{Name: "n", Type: pipeline.TypeInt32, Key: true},
			{Name: "price", Type: pipeline.TypeFloat64, Nullable: true},
			{Name: "day", Type: pipeline.TypeDate, Nullable: true},
			{Name: "ref", Type: pipeline.TypeUUID, Nullable: true},
			{Name: "doc", Type: pipeline.TypeJSON, Nullable: true},
			{Name: "span", Type: pipeline.TypeInterval, Nullable: true},
		},
		KeyIdx:     []int{0, 1},
		Generation: 1,
	}
)

const noteCol = 5 // Accounts.note: the column updates sometimes leave Unchanged

// snapshotVersion is below every stream change, as a Postgres snapshot's is.
var snapshotVersion = pipeline.Version{0, 1000, 0, 0}

// ChangeLog is a generated feed: batches in emission order and the state
// of the source database after all of them.
type ChangeLog struct {
	Batches [][]pipeline.Record
	// Final is the source's live rows per table, keyed by RowKey.
	Final map[*pipeline.Table]map[string][]any
}

// GenerateLog builds a deterministic change log: a snapshot of both tables
// whose chunks are emitted interleaved with (and partly after) the stream
// changes, inserts, updates (some leaving a column Unchanged), deletes, and
// a truncate of Items followed by new inserts.
func GenerateLog(seed uint64) *ChangeLog {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	g := &logGen{rng: rng, live: map[*pipeline.Table]map[string][]any{Accounts: {}, Items: {}}, streamed: map[string]bool{}}
	// The database as the snapshot sees it.
	var snap []pipeline.Record
	for i := 0; i < 16; i++ {
		snap = append(snap, g.read(Accounts, g.newAccount()))
	}
	for i := 0; i < 10; i++ {
		snap = append(snap, g.read(Items, g.newItem()))
	}
	// Stream transactions after the snapshot's consistent point.
	var stream [][]pipeline.Record
	const txs = 40
	for tx := 1; tx <= txs; tx++ {
		n := 1 + rng.IntN(4)
		var recs []pipeline.Record
		if tx == txs/2 {
			recs = append(recs, g.truncate(Items, tx))
			n = 1
		}
		for i := 0; i < n; i++ {
			recs = append(recs, g.change(tx, len(recs)))
		}
		stream = append(stream, recs)
	}
	// Emit the snapshot in chunks: the first before the stream, the others
	// after random stream transactions, so that some snapshot rows arrive
	// after newer updates, deletes and the truncate of their keys.
	chunks := slices.Collect(slices.Chunk(snap, 5))
	at := make([]int, len(chunks))
	for i := 1; i < len(chunks); i++ {
		at[i] = rng.IntN(len(stream) + 1)
	}
	at[len(at)-1] = len(stream) // one chunk certainly after every change
	log := &ChangeLog{Final: g.live}
	for s := 0; s <= len(stream); s++ {
		for i, a := range at {
			if a == s {
				log.Batches = append(log.Batches, chunks[i])
			}
		}
		if s < len(stream) {
			log.Batches = append(log.Batches, stream[s])
		}
	}
	return log
}

type logGen struct {
	rng      *rand.Rand
	live     map[*pipeline.Table]map[string][]any
	nextID   int64
	nextN    int64
	streamed map[string]bool // Accounts keys inserted by the stream
}

func (g *logGen) newAccount() []any {
	g.nextID++
	return []any{g.nextID, fmt.Sprintf("acct-%d", g.nextID), g.decimal(), g.timestamp(), g.rng.IntN(2) == 0,
		g.maybe(fmt.Sprintf("note %d", g.rng.IntN(1000))), g.tags()}
}

func (g *logGen) newItem() []any {
	g.nextN++
	regions := []string{"eu", "us", "ap"}
	var ref pipeline.UUID
	for i := range ref {
		ref[i] = byte(g.rng.UintN(256))
	}
	return []any{regions[g.rng.IntN(len(regions))], g.nextN, float64(g.rng.IntN(100000)) / 8,
		pipeline.Date{Days: int32(18000 + g.rng.IntN(3000))}, ref,
		pipeline.JSON(fmt.Sprintf(`{"v": %d, "ok": true}`, g.rng.IntN(100))),
		pipeline.Interval{Months: int32(g.rng.IntN(5)), Days: int32(g.rng.IntN(40)) - 20, Micros: g.rng.Int64N(1e10) - 5e9}}
}

func (g *logGen) decimal() pipeline.Decimal {
	return pipeline.Decimal{Unscaled: big.NewInt(g.rng.Int64N(2e8) - 1e8), Scale: 2}
}

func (g *logGen) timestamp() pipeline.Timestamp {
	return pipeline.Timestamp{Micros: 1.6e15 + g.rng.Int64N(1e14)}
}

func (g *logGen) tags() any {
	if g.rng.IntN(4) == 0 {
		return nil
	}
	t := make([]any, g.rng.IntN(3))
	for i := range t {
		t[i] = fmt.Sprintf("t%d", g.rng.IntN(9))
	}
	return t
}

func (g *logGen) maybe(v any) any {
	if g.rng.IntN(5) == 0 {
		return nil
	}
	return v
}

func (g *logGen) read(t *pipeline.Table, row []any) pipeline.Record {
	g.live[t][RowKey(t, row)] = row
	return pipeline.Record{Op: pipeline.OpRead, Table: t, After: row, Version: snapshotVersion}
}

func streamVersion(tx, i int) pipeline.Version {
	return pipeline.Version{0, 1000 + uint64(tx), 0, uint64(i) + 1}
}

func (g *logGen) truncate(t *pipeline.Table, tx int) pipeline.Record {
	clear(g.live[t])
	return pipeline.Record{Op: pipeline.OpTruncate, Table: t, Version: streamVersion(tx, 0)}
}

// change makes one stream change on the live database state.
func (g *logGen) change(tx, i int) pipeline.Record {
	t := Accounts
	if g.rng.IntN(3) == 0 {
		t = Items
	}
	keys := slices.Sorted(maps.Keys(g.live[t]))
	v := streamVersion(tx, i)
	op := g.rng.IntN(10)
	switch {
	case len(keys) == 0 || op < 3: // insert
		row := g.newAccount
		if t == Items {
			row = g.newItem
		}
		r := row()
		g.live[t][RowKey(t, r)] = r
		g.streamed[RowKey(t, r)] = t == Accounts
		return pipeline.Record{Op: pipeline.OpInsert, Table: t, After: r, Version: v}
	case op < 8: // update
		k := keys[g.rng.IntN(len(keys))]
		old := g.live[t][k]
		fresh := g.newAccount
		if t == Items {
			fresh = g.newItem
		}
		r := fresh()
		for _, idx := range t.KeyIdx {
			r[idx] = old[idx]
		}
		after := slices.Clone(r)
		if t == Accounts && g.streamed[k] && g.rng.IntN(2) == 0 {
			// The note did not change and was not sent (unchanged TOAST).
			// Only for rows inserted by the stream: a row whose snapshot
			// read arrives after such an update has nothing to keep.
			r[noteCol], after[noteCol] = old[noteCol], pipeline.UnchangedValue
		}
		g.live[t][k] = r
		return pipeline.Record{Op: pipeline.OpUpdate, Table: t, After: after, Version: v}
	default: // delete
		k := keys[g.rng.IntN(len(keys))]
		old := g.live[t][k]
		delete(g.live[t], k)
		before := make([]any, len(old))
		for _, idx := range t.KeyIdx {
			before[idx] = old[idx]
		}
		return pipeline.Record{Op: pipeline.OpDelete, Table: t, Before: before, Version: v}
	}
}

// Model applies records with the semantics Invariant 4 asks of every sink,
// one record at a time, to compute the expected target state.
type Model struct {
	rows     map[*pipeline.Table]map[string]*modelRow
	barriers map[*pipeline.Table]pipeline.Version
}

type modelRow struct {
	version pipeline.Version
	deleted bool
	vals    []any
}

// NewModel returns an empty model.
func NewModel() *Model {
	return &Model{rows: map[*pipeline.Table]map[string]*modelRow{}, barriers: map[*pipeline.Table]pipeline.Version{}}
}

// Apply applies records in order.
func (m *Model) Apply(records []pipeline.Record) {
	for i := range records {
		m.apply(&records[i])
	}
}

func (m *Model) apply(r *pipeline.Record) {
	if !r.Op.IsData() || r.Table == nil {
		return
	}
	t := r.Table
	if m.rows[t] == nil {
		m.rows[t] = map[string]*modelRow{}
	}
	if b, ok := m.barriers[t]; ok && r.Version.Less(b) {
		return // below the truncate barrier
	}
	if r.Op == pipeline.OpTruncate {
		for _, row := range m.rows[t] {
			if row.version.Less(r.Version) {
				row.deleted, row.version = true, r.Version
			}
		}
		m.barriers[t] = r.Version
		return
	}
	img := r.After
	if r.Op == pipeline.OpDelete {
		img = r.Before
	}
	k := RowKey(t, img)
	cur := m.rows[t][k]
	if cur != nil && !cur.version.Less(r.Version) {
		return // not newer than what the target holds
	}
	next := &modelRow{version: r.Version, deleted: r.Op == pipeline.OpDelete, vals: make([]any, len(img))}
	for i, v := range img {
		_, unchanged := v.(pipeline.Unchanged)
		keep := r.Op == pipeline.OpDelete || unchanged
		if slices.Contains(t.KeyIdx, i) {
			keep = false
		}
		switch {
		case !keep:
			next.vals[i] = v
		case cur != nil:
			next.vals[i] = cur.vals[i]
		}
	}
	m.rows[t][k] = next
}

// Live returns the live rows of a table, keyed by RowKey.
func (m *Model) Live(t *pipeline.Table) map[string][]any {
	out := map[string][]any{}
	for k, row := range m.rows[t] {
		if !row.deleted {
			out[k] = row.vals
		}
	}
	return out
}

// Keys returns the key values of every row the model has seen for t, live
// or deleted, in RowKey order.
func (m *Model) Keys(t *pipeline.Table) [][]any {
	keys := slices.Sorted(maps.Keys(m.rows[t]))
	out := make([][]any, 0, len(keys))
	for _, k := range keys {
		row := m.rows[t][k]
		key := make([]any, len(t.KeyIdx))
		for i, idx := range t.KeyIdx {
			key[i] = row.vals[idx]
		}
		out = append(out, key)
	}
	return out
}

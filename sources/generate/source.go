package generate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Mix weighs the kinds of changes after the initial rows.
type Mix struct {
	Insert, Update, Delete int
}

// Options configures a generated feed. The feed is a pure function of the
// options (Rate aside, which only paces it).
type Options struct {
	Seed int64
	// Tables is how many of demo.customers, demo.orders, demo.events (in
	// that order) the feed writes: 1 to 3, 3 when zero.
	Tables int
	// InitialRows is the number of rows per table inserted first.
	InitialRows int
	// Changes is the number of mixed changes after the initial rows; 0
	// makes the feed unbounded. A bounded feed ends with io.EOF.
	Changes int64
	// Rate caps the changes per second; 0 means unthrottled. Catching up
	// on Open is never throttled.
	Rate float64
	// Mix weighs inserts, updates and deletes (5:4:1 when all zero).
	Mix Mix
	// Batch is the number of changes per transaction (100 when zero).
	// Transactions end at multiples of Batch, so every reader sees the same
	// boundaries.
	Batch int
	// Database names the TableIDs' database ("demo" when empty).
	Database string
}

func (o Options) withDefaults() Options {
	if o.Tables <= 0 || o.Tables > 3 {
		o.Tables = 3
	}
	if o.Mix.Insert < 0 || o.Mix.Update < 0 || o.Mix.Delete < 0 || o.Mix.Insert+o.Mix.Update+o.Mix.Delete == 0 {
		o.Mix = Mix{Insert: 5, Update: 4, Delete: 1}
	}
	if o.Batch <= 0 {
		o.Batch = 100
	}
	if o.Database == "" {
		o.Database = "demo"
	}
	return o
}

// position is the feed's resume token: the number of changes emitted.
type position struct {
	Seq int64 `json:"seq"`
	// Generation leads every version (Invariant 10).
	Generation uint64 `json:"generation,omitempty"`
}

// Pos returns the position after the first seq changes of generation 0.
func Pos(seq int64) pipeline.Position { return genPos(seq, 0) }

func genPos(seq int64, gen uint64) pipeline.Position {
	b, _ := json.Marshal(position{Seq: seq, Generation: gen})
	return b
}

// ParsePos reads the seq of a position made by Pos.
func ParsePos(p pipeline.Position) (int64, error) {
	pos, err := parsePos(p)
	return pos.Seq, err
}

func parsePos(p pipeline.Position) (position, error) {
	var pos position
	if err := json.Unmarshal(p, &pos); err != nil {
		return position{}, fmt.Errorf("generate: position %q: %w", p, err)
	}
	if pos.Seq < 0 {
		return position{}, fmt.Errorf("generate: position %q: negative seq", p)
	}
	return pos, nil
}

// Source is a deterministic synthetic change feed; it implements
// pipeline.Source. Change n (from 1) has version {generation, 0, 0, n}; each
// batch is one transaction whose Pos is {"seq": N}, N the number of changes
// emitted once the batch is handed over. The generation is 0 on a first run
// and rises above what sinks hold when the feed starts again from nothing
// (pipeline.Generational).
type Source struct {
	opts   Options
	tables []*pipeline.Table
	st     *state
	// pacing: the clock and the number of changes emitted since start.
	start   time.Time
	emitted int64
	acked   atomic.Int64
	// floor is the highest generation a sink recorded (floorHeld: any).
	floor     uint64
	floorHeld bool
	gen       uint64
}

var _ pipeline.Source = (*Source)(nil)

// New returns an unopened Source.
func New(opts Options) *Source {
	opts = opts.withDefaults()
	return &Source{opts: opts, tables: Tables(opts)}
}

// Open resumes strictly after from (nil: from the first change). It
// regenerates the feed's key space up to from without producing row values
// and without pacing, so it is fast even far into the feed.
func (s *Source) Open(ctx context.Context, from pipeline.Position) error {
	var seq int64
	s.gen = pipeline.NextGeneration(s.floor, s.floorHeld, false, 0, false)
	if from != nil {
		p, err := parsePos(from)
		if err != nil {
			return pipeline.Fatal(err)
		}
		seq, s.gen = p.Seq, pipeline.NextGeneration(s.floor, s.floorHeld, true, p.Generation, false)
	}
	st := newState(s.opts)
	if total := st.total(); total >= 0 && seq > total {
		return pipeline.Fatal(fmt.Errorf("generate: position seq %d is past the feed's end (%d changes)", seq, total))
	}
	for st.seq < seq {
		if st.seq%65536 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		st.advance()
	}
	s.st, s.start, s.emitted = st, time.Now(), 0
	s.acked.Store(seq)
	return nil
}

// FloorGeneration implements pipeline.Generational.
func (s *Source) FloorGeneration(floor uint64, held bool) { s.floor, s.floorHeld = floor, held }

// Read returns the next transaction: the changes up to the next multiple of
// Batch (fewer at the end of a bounded feed), paced by Rate.
func (s *Source) Read(ctx context.Context) (pipeline.Batch, error) {
	if err := ctx.Err(); err != nil {
		return pipeline.Batch{}, err
	}
	if s.st == nil {
		return pipeline.Batch{}, fmt.Errorf("generate: read before open")
	}
	end := (s.st.seq/int64(s.opts.Batch) + 1) * int64(s.opts.Batch)
	if total := s.st.total(); total >= 0 {
		if s.st.seq >= total {
			return pipeline.Batch{}, io.EOF
		}
		end = min(end, total)
	}
	n := end - s.st.seq
	if s.opts.Rate > 0 {
		// Token bucket without per-record sleeps: the batch may go out once
		// the clock allows every change in it.
		due := s.start.Add(time.Duration(float64(s.emitted+n) / s.opts.Rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return pipeline.Batch{}, ctx.Err()
			case <-t.C:
			}
		}
	}
	pos := genPos(end, s.gen)
	b := pipeline.Batch{Records: make([]pipeline.Record, 0, n), Pos: pos}
	for s.st.seq < end {
		b.Records = append(b.Records, s.record(s.st.advance(), pos))
	}
	s.emitted += n
	return b, nil
}

func (s *Source) record(c step, pos pipeline.Position) pipeline.Record {
	r := pipeline.Record{Op: c.op, Table: s.tables[c.table], Version: pipeline.Version{s.gen, 0, 0, uint64(c.seq)},
		EventTime: epoch.Add(time.Duration(c.seq) * time.Millisecond), TxID: uint64((c.seq-1)/int64(s.opts.Batch)) + 1, Pos: pos}
	if c.op == pipeline.OpDelete {
		r.Before = make([]any, len(r.Table.Columns))
		r.Before[0] = s.st.keyOf(c.table, c.id)
	} else {
		r.After = s.st.row(c.table, c.id, c.seq)
	}
	r.Size = pipeline.EstimateSize(&r)
	return r
}

// Ack records the acknowledged position; the feed has nothing to release.
func (s *Source) Ack(ctx context.Context, upTo pipeline.Position) error {
	seq, err := ParsePos(upTo)
	if err != nil {
		return err
	}
	s.acked.Store(seq)
	return nil
}

// Acked returns the seq of the last acknowledged position.
func (s *Source) Acked() int64 { return s.acked.Load() }

// Close does nothing: the feed holds no resources.
func (s *Source) Close(ctx context.Context) error { return nil }

// Expected returns the live rows of each table after the first upTo
// changes of the feed of opts, keyed by KeyText of the row's key.
func Expected(opts Options, upTo int64) map[pipeline.TableID]map[string][]any {
	opts = opts.withDefaults()
	tables := Tables(opts)
	st := newState(opts)
	if total := st.total(); total >= 0 {
		upTo = min(upTo, total)
	}
	for st.seq < upTo {
		st.advance()
	}
	out := make(map[pipeline.TableID]map[string][]any, len(tables))
	for t, table := range tables {
		rows := make(map[string][]any, len(st.live[t].ids))
		for _, id := range st.live[t].ids {
			row := st.row(t, id, st.live[t].last[id])
			rows[KeyText(row[0])] = row
		}
		out[table.ID] = rows
	}
	return out
}

// Total is the number of changes of a bounded feed (initial rows
// included), -1 for an endless one: a checkpoint at Pos(Total) has seen
// all of it.
func Total(opts Options) int64 { return newState(opts.withDefaults()).total() }

// KeyText is the text form of a feed table's key value: the decimal id, or
// the UUID's canonical form.
func KeyText(key any) string {
	switch k := key.(type) {
	case int64:
		return fmt.Sprint(k)
	case pipeline.UUID:
		return k.String()
	}
	return fmt.Sprintf("%v", key)
}

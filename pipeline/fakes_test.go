package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"
)

var testTable = &Table{ID: TableID{Schema: "s", Table: "t"}, Columns: []Column{
	{Name: "id", Type: TypeInt64, Key: true}, {Name: "v", Type: TypeInt64}}, KeyIdx: []int{0}}

// feedSource emits total records in batches of size, each batch a position
// {"n": index of the last record}. total < 0: endless.
type feedSource struct {
	total, size int
	keys        int
	mu          sync.Mutex
	next        int
	acks        []int
	events      *eventLog
	readHook    func(n int)
}

func (s *feedSource) Open(_ context.Context, from Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if from != nil {
		var p struct{ N int }
		if err := json.Unmarshal(from, &p); err != nil {
			return err
		}
		s.next = p.N + 1
	}
	return nil
}

func (s *feedSource) Read(ctx context.Context) (Batch, error) {
	if err := ctx.Err(); err != nil {
		return Batch{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= 0 && s.next >= s.total {
		return Batch{}, io.EOF
	}
	var b Batch
	for i := 0; i < s.size && (s.total < 0 || s.next < s.total); i++ {
		n := s.next
		s.next++
		keys := s.keys
		if keys == 0 {
			keys = 10
		}
		b.Records = append(b.Records, Record{Op: OpUpdate, Table: testTable, After: []any{int64(n % keys), int64(n)},
			Version: Version{0, 0, 0, uint64(n + 1)}, EventTime: time.Now(), Size: 100})
		b.Pos = Position(fmt.Sprintf(`{"n":%d}`, n))
	}
	if s.readHook != nil {
		s.readHook(s.next)
	}
	return b, nil
}

func (s *feedSource) Ack(_ context.Context, upTo Position) error {
	var p struct{ N int }
	if err := json.Unmarshal(upTo, &p); err != nil {
		return err
	}
	s.mu.Lock()
	s.acks = append(s.acks, p.N)
	s.mu.Unlock()
	s.events.add("ack " + strconv.Itoa(p.N))
	return nil
}

func (s *feedSource) Close(context.Context) error { s.events.add("close source"); return nil }

func (s *feedSource) ackList() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.acks...)
}

// memSink keeps the newest version per key, like a real sink (Invariant 4).
type memSink struct {
	name   string
	mu     sync.Mutex
	rows   map[int64]int64 // key → value (the feed's n)
	vers   map[int64]Version
	delay  func() time.Duration
	fail   func(recs []Record) error
	block  chan struct{}
	events *eventLog
	writes int
}

func newMemSink(name string, ev *eventLog) *memSink {
	return &memSink{name: name, rows: map[int64]int64{}, vers: map[int64]Version{}, events: ev}
}

func (m *memSink) Open(context.Context) error { return nil }

func (m *memSink) Write(ctx context.Context, recs []Record) error {
	if m.block != nil {
		select {
		case <-m.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if m.delay != nil {
		select {
		case <-time.After(m.delay()):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if m.fail != nil {
		if err := m.fail(recs); err != nil {
			var be *BatchError
			if !errors.As(err, &be) {
				return err
			}
			failed := map[int]bool{}
			for _, f := range be.Failed {
				failed[f.Index] = true
			}
			m.apply(recs, failed)
			return err
		}
	}
	m.apply(recs, nil)
	return nil
}

func (m *memSink) apply(recs []Record, skip map[int]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	for i, r := range recs {
		if skip[i] || r.Table == nil {
			continue
		}
		if r.After == nil { // a delete: a tombstone at its version
			k := r.Before[0].(int64)
			if v, ok := m.vers[k]; !ok || v.Less(r.Version) {
				m.vers[k] = r.Version
				delete(m.rows, k)
			}
			continue
		}
		k := r.After[0].(int64)
		if v, ok := m.vers[k]; ok && !v.Less(r.Version) {
			continue
		}
		m.vers[k] = r.Version
		m.rows[k] = r.After[1].(int64)
	}
}

// has reports whether the sink holds record n or a newer version of its key.
func (m *memSink) has(n, keys int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vers[int64(n%keys)]
	return ok && v[3] >= uint64(n+1)
}

func (m *memSink) Close(context.Context) error { m.events.add("close sink " + m.name); return nil }

// memStore is an in-memory OffsetStore with a commit hook.
type memStore struct {
	mu      sync.Mutex
	cp      Checkpoint
	ok      bool
	commits int
	hook    func(cp Checkpoint) error
	events  *eventLog
}

func (s *memStore) Load(context.Context, string) (Checkpoint, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cp, s.ok, nil
}

func (s *memStore) Commit(_ context.Context, cp Checkpoint) error {
	if s.hook != nil {
		if err := s.hook(cp); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.cp, s.ok = cp, true
	s.commits++
	s.mu.Unlock()
	s.events.add("commit " + string(cp.Position))
	return nil
}

func (s *memStore) Close() error { return nil }

func (s *memStore) position() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ok {
		return -1
	}
	var p struct{ N int }
	_ = json.Unmarshal(s.cp.Position, &p)
	return p.N
}

type memDLQ struct {
	mu      sync.Mutex
	letters []DeadLetter
}

func (d *memDLQ) Put(_ context.Context, l []DeadLetter) error {
	d.mu.Lock()
	d.letters = append(d.letters, l...)
	d.mu.Unlock()
	return nil
}
func (d *memDLQ) Depth() int64             { d.mu.Lock(); defer d.mu.Unlock(); return int64(len(d.letters)) }
func (d *memDLQ) OldestAge() time.Duration { return 0 }
func (d *memDLQ) Close() error             { return nil }

type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (e *eventLog) add(s string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.ev = append(e.ev, s)
	e.mu.Unlock()
}

func (e *eventLog) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.ev...)
}

// maxObserver records the largest in-flight figures reported.
type maxObserver struct {
	NopObserver
	mu       sync.Mutex
	maxRecs  int
	maxBytes int64
	e2e      int
}

func (o *maxObserver) InFlight(n int, b int64) {
	o.mu.Lock()
	if n > o.maxRecs {
		o.maxRecs = n
	}
	if b > o.maxBytes {
		o.maxBytes = b
	}
	o.mu.Unlock()
}

func (o *maxObserver) EndToEnd(time.Duration) { o.mu.Lock(); o.e2e++; o.mu.Unlock() }

func (s *memStore) commitCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}

// listSource emits fixed batches, each with position {"n": its index}.
// runToEnd runs rt, which New returned with err, until its source ends
// (a minute at most).
func runToEnd(t *testing.T, rt *Runtime, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rt.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

type listSource struct {
	mu      sync.Mutex
	batches [][]Record
	next    int
}

// Open resumes after the batch a checkpoint position names.
func (s *listSource) Open(_ context.Context, from Position) error {
	if from != nil {
		var p struct{ N int }
		if err := json.Unmarshal(from, &p); err != nil {
			return err
		}
		s.mu.Lock()
		s.next = p.N + 1
		s.mu.Unlock()
	}
	return nil
}
func (s *listSource) Read(ctx context.Context) (Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next >= len(s.batches) {
		return Batch{}, io.EOF
	}
	b := Batch{Records: s.batches[s.next], Pos: Position(fmt.Sprintf(`{"n":%d}`, s.next))}
	s.next++
	return b, nil
}
func (s *listSource) Ack(context.Context, Position) error { return nil }
func (s *listSource) Close(context.Context) error         { return nil }

// funcSink hands every batch to write.
type funcSink struct{ write func([]Record) error }

func (f *funcSink) Open(context.Context) error                   { return nil }
func (f *funcSink) Write(_ context.Context, recs []Record) error { return f.write(recs) }
func (f *funcSink) Close(context.Context) error                  { return nil }

package dlq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/pipeline"
)

var ctx = context.Background()

func openT(t *testing.T, dir string, opts ...Option) *File {
	t.Helper()
	f, err := OpenFile(dir, "orders", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func letter(i int, at time.Time) pipeline.DeadLetter {
	return pipeline.DeadLetter{
		Time: at, Stage: "sink:ch", Table: "public.orders", Op: "u",
		Position: json.RawMessage(fmt.Sprintf(`{"lsn":%d}`, i)),
		Error:    fmt.Sprintf("rejected #%d", i), Raw: []byte(fmt.Sprintf(`{"id":%d}`, i)),
	}
}

// readAll decodes every line of the file.
func readAll(t *testing.T, path string) []pipeline.DeadLetter {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []pipeline.DeadLetter
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l pipeline.DeadLetter
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

func TestPutReopenDepth(t *testing.T) {
	dir := t.TempDir()
	f := openT(t, dir)
	if f.Depth() != 0 || f.OldestAge() != 0 {
		t.Fatalf("empty: depth %d age %v", f.Depth(), f.OldestAge())
	}
	t0 := time.Now().Add(-time.Hour)
	if err := f.Put(ctx, []pipeline.DeadLetter{letter(1, t0), letter(2, t0.Add(time.Minute))}); err != nil {
		t.Fatal(err)
	}
	if err := f.Put(ctx, []pipeline.DeadLetter{letter(3, time.Time{})}); err != nil {
		t.Fatal(err)
	}
	if f.Depth() != 3 {
		t.Fatalf("depth %d", f.Depth())
	}
	fi, err := os.Stat(f.Path())
	if err != nil || fi.Mode().Perm() != 0o600 || !strings.HasSuffix(f.Path(), "orders.dlq.jsonl") {
		t.Fatalf("file %s: %v %v", f.Path(), fi.Mode(), err)
	}
	got := readAll(t, f.Path())
	if len(got) != 3 || got[0].Pipeline != "orders" || got[2].Time.IsZero() || got[1].Error != "rejected #2" {
		t.Fatalf("lines: %+v", got)
	}
	f.Close()
	f = openT(t, dir)
	if f.Depth() != 3 {
		t.Fatalf("depth after reopen %d", f.Depth())
	}
	if age := f.OldestAge(); age < time.Hour || age > time.Hour+time.Minute {
		t.Fatalf("oldest age after reopen %v, want about 1h", age)
	}
}

func TestOldestAge(t *testing.T) {
	f := openT(t, t.TempDir())
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.now = func() time.Time { return now }
	// Letters may arrive out of time order; the oldest wins.
	if err := f.Put(ctx, []pipeline.DeadLetter{letter(1, now.Add(-10*time.Second)), letter(2, now.Add(-30*time.Second))}); err != nil {
		t.Fatal(err)
	}
	if err := f.Put(ctx, []pipeline.DeadLetter{letter(3, now.Add(-5*time.Second))}); err != nil {
		t.Fatal(err)
	}
	if got := f.OldestAge(); got != 30*time.Second {
		t.Fatalf("OldestAge %v, want 30s", got)
	}
	now = now.Add(time.Minute)
	if got := f.OldestAge(); got != 90*time.Second {
		t.Fatalf("OldestAge %v, want 90s", got)
	}
}

func TestTornLastLine(t *testing.T) {
	dir := t.TempDir()
	f := openT(t, dir)
	if err := f.Put(ctx, []pipeline.DeadLetter{letter(1, time.Now()), letter(2, time.Now())}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	whole, _ := os.ReadFile(f.Path())
	// A crash in the middle of the next append.
	torn := append(append([]byte(nil), whole...), []byte(`{"time":"2026-01-01T00:00:00Z","pipeline":"ord`)...)
	if err := os.WriteFile(f.Path(), torn, 0o600); err != nil {
		t.Fatal(err)
	}
	f = openT(t, dir)
	if f.Depth() != 2 {
		t.Fatalf("depth %d, want 2", f.Depth())
	}
	if now, _ := os.ReadFile(f.Path()); !bytes.Equal(now, whole) {
		t.Fatalf("torn tail not cut:\n%s", now)
	}
	if err := f.Put(ctx, []pipeline.DeadLetter{letter(3, time.Now())}); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, f.Path()); len(got) != 3 || got[2].Error != "rejected #3" {
		t.Fatalf("after append: %+v", got)
	}
}

func TestRawBytesRoundTrip(t *testing.T) {
	raw := []byte{0x00, 0xff, 0xfe, '\n', '"', '\\', 0xc3, 0x28, 0xed, 0xa0, 0x80, 'x', 0x1b}
	f := openT(t, t.TempDir())
	l := letter(1, time.Now())
	l.Raw = raw
	l.Error = "bad byte \xff in\nmessage"
	if err := f.Put(ctx, []pipeline.DeadLetter{l}); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, f.Path())
	if len(got) != 1 || !bytes.Equal(got[0].Raw, raw) {
		t.Fatalf("raw = %x, want %x", got[0].Raw, raw)
	}
	if n := bytes.Count(mustRead(t, f.Path()), []byte("\n")); n != 1 {
		t.Fatalf("one letter spans %d lines", n)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConcurrentPut(t *testing.T) {
	dir := t.TempDir()
	f := openT(t, dir)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := f.Put(ctx, []pipeline.DeadLetter{letter(w*1000+i, time.Now()), letter(w*1000+i, time.Now())}); err != nil {
					t.Error(err)
					return
				}
				_ = f.Depth()
				_ = f.OldestAge()
			}
		}(w)
	}
	wg.Wait()
	if f.Depth() != workers*each*2 {
		t.Fatalf("depth %d", f.Depth())
	}
	if got := readAll(t, f.Path()); len(got) != workers*each*2 {
		t.Fatalf("%d lines", len(got))
	}
	f.Close()
	if f2 := openT(t, dir); f2.Depth() != workers*each*2 {
		t.Fatalf("reopened depth %d", f2.Depth())
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	dir := t.TempDir()
	f := openT(t, dir, WithRegisterer(reg))
	if _, err := OpenFile(dir, "orders", WithRegisterer(reg)); err == nil {
		t.Fatal("second registration of the same pipeline succeeded")
	}
	if err := f.Put(ctx, []pipeline.DeadLetter{letter(1, time.Now().Add(-time.Minute))}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP sluice_dlq_depth Dead letters stored in the pipeline's dead-letter queue.
# TYPE sluice_dlq_depth gauge
sluice_dlq_depth{pipeline="orders"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_dlq_depth"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_dlq_oldest_age_seconds"); err != nil || n != 1 {
		t.Fatalf("oldest age gauge: %d %v", n, err)
	}
	f.Close()
	if n, _ := testutil.GatherAndCount(reg); n != 0 {
		t.Fatalf("%d metrics left after Close", n)
	}
	if len(f.Collectors()) != 2 {
		t.Fatal("Collectors")
	}
}

func TestBadNamesAndClosed(t *testing.T) {
	for _, name := range []string{"", "..", "a/b", `a\b`} {
		if _, err := OpenFile(t.TempDir(), name); err == nil {
			t.Errorf("OpenFile(%q) succeeded", name)
		}
	}
	f := openT(t, t.TempDir())
	f.Close()
	if err := f.Put(ctx, []pipeline.DeadLetter{letter(1, time.Now())}); err == nil {
		t.Fatal("Put after Close succeeded")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := openT(t, t.TempDir()).Put(cctx, []pipeline.DeadLetter{letter(1, time.Now())}); err == nil {
		t.Fatal("Put with canceled ctx succeeded")
	}
}

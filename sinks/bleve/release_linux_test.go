package bleve

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-cdc/sluice/pipeline"
)

// mappedRSS is the resident size, in bytes, of this process's mappings of
// files under dir (/proc/self/smaps).
func mappedRSS(t *testing.T, dir string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			in = len(fields) >= 6 && strings.HasPrefix(fields[5], dir+"/")
		case in && len(fields) == 3 && fields[0] == "Rss:":
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

// TestReleaseDropsMappedSegmentPages: the pages of the index's segment
// files that reads mapped into the process leave its RSS within a few
// releaseEvery, and every row reads back the same afterwards.
func TestReleaseDropsMappedSegmentPages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "index")
	s := openSink(t, Options{Path: dir})
	var want [][]any
	for b := 0; b < 4; b++ {
		var recs []pipeline.Record
		for i := 0; i < 5000; i++ {
			id := int64(b*5000 + i)
			row := []any{id, "name " + strconv.FormatInt(id, 10), strings.Repeat("bio of a person ", 8)}
			recs = append(recs, change(pipeline.OpInsert, uint64(id+1), row...))
			want = append(want, row)
		}
		mustWrite(t, s, recs...)
	}
	// With the loop stopped, reading maps the stored fields' pages.
	s.mu.Lock()
	s.stopRelease()
	s.mu.Unlock()
	expectRows(t, s, people, want...)
	before := mappedRSS(t, dir)
	if before < 1<<20 {
		t.Fatalf("reading 20,000 rows mapped %d bytes of segment files; want over 1 MiB to release", before)
	}
	// The sink's loop drops them within releaseEvery; a background merge
	// may map a few pages again meanwhile.
	s.mu.Lock()
	s.stopRelease = s.startRelease()
	s.mu.Unlock()
	after := before
	for deadline := time.Now().Add(10 * time.Second); after > before/4 && time.Now().Before(deadline); {
		time.Sleep(releaseEvery / 5)
		after = mappedRSS(t, dir)
	}
	if after > before/4 {
		t.Fatalf("segment pages resident: %d bytes before the release, %d after", before, after)
	}
	t.Logf("segment pages resident: %d bytes before the release, %d after", before, after)
	expectRows(t, s, people, want...)
}

// touched keeps the test's page reads from being optimised away.
var touched byte

// pageOutOthers reclaims the pages of a segment file's mapping that is not
// in the live set, leaves those of live ones alone, and ignores files that
// are not segments of the index.
func TestPageOutOthersReclaimsSegmentsOutsideTheSnapshot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "index")
	store := filepath.Join(dir, "store")
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	mapped := func(name string) []byte {
		p := filepath.Join(store, name)
		if err := os.WriteFile(p, []byte(strings.Repeat("segment bytes ", 300_000)), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := unix.Mmap(int(f.Fd()), 0, 14*300_000, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		return b
	}
	gone, live, other := mapped("000000000001.zap"), mapped("000000000002.zap"), mapped("bolt.meta")
	touch := func() {
		var sum byte
		for _, b := range [][]byte{gone, live, other} {
			for i := 0; i < len(b); i += 4096 {
				sum += b[i]
			}
		}
		touched += sum
	}
	touch()
	// Deleted with its file, as a merged-away segment is.
	if err := os.Remove(filepath.Join(store, "000000000001.zap")); err != nil {
		t.Fatal(err)
	}
	before := mappedRSS(t, dir)
	pageOutOthers(dir, map[uintptr]bool{start(live): true})
	after := mappedRSS(t, dir)
	// gone's 4 MiB leave; live's and other's stay.
	if before-after < 3<<20 || after < 7<<20 {
		t.Fatalf("resident %d bytes before, %d after; want gone's ~4 MiB reclaimed and the 8 MiB of the others kept", before, after)
	}
	if string(gone[:14]) != "segment bytes " {
		t.Fatal("a reclaimed page reads differently")
	}
}

package bleve

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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
	expectRows(t, s, people, want...) // maps the stored fields' pages
	before := mappedRSS(t, dir)
	if before < 1<<20 {
		t.Fatalf("reading 20,000 rows mapped %d bytes of segment files; want over 1 MiB to release", before)
	}
	// The sink's loop drops them within releaseEvery; a background merge
	// may map a few pages again meanwhile.
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

package bleve

import (
	"time"

	"github.com/blevesearch/bleve/v2/index/scorch"
	index "github.com/blevesearch/bleve_index_api"
	zapv15 "github.com/blevesearch/zapx/v15"
	zapv16 "github.com/blevesearch/zapx/v16"
	zapv17 "github.com/blevesearch/zapx/v17"
)

// Invariant 6: scorch reads its persisted segments through read-only
// memory maps, and every page a lookup or a merge touches stays mapped
// into the process until the segment is closed. The process's RSS then
// grows with the index (a 2,000,000-change drain: 604 MiB, of which 168
// anonymous), although those pages are the kernel's page cache, which it
// reclaims under pressure. RSS is what monitors and the kernel's OOM
// score read, so while the index is open the sink drops its mapped pages
// from the process's page tables every releaseEvery: the page cache
// keeps them, and the next access maps them again without reading the
// disk (a minor fault). A merge reads whole segments in the background,
// between and during Writes, at several hundred MiB a second: a release
// after each Write left a 350 MiB peak at this backlog, one every 250 ms
// still let 60-70 MiB of segment pages in between, hence a short clock.
// A release costs a walk of the segments' page tables (well under a
// millisecond at this size) and the pages a lookup needs again are
// mapped back from the page cache.

// releaseEvery is the time between two releases of mapped pages.
const releaseEvery = 50 * time.Millisecond

// startRelease starts the loop that drops mapped pages and returns the
// function that stops it and waits for it. It runs beside Writes and
// searches, holding idxMu shared like a search.
func (s *Sink) startRelease() (stop func()) {
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(releaseEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				s.releaseMapped()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// mappedData returns the memory-mapped bytes of the persisted segments of
// r (a scorch snapshot). Only segments whose data is a file mapping are
// listed: in-memory segments hold heap memory, which must never be
// released this way. The slices stay mapped while r is open (the
// snapshot holds a reference to every segment in it).
func mappedData(r index.IndexReader) [][]byte {
	snap, ok := r.(*scorch.IndexSnapshot)
	if !ok {
		return nil
	}
	var out [][]byte
	for _, ss := range snap.Segments() {
		switch seg := ss.Segment().(type) {
		case *zapv17.Segment:
			out = append(out, seg.Data())
		case *zapv16.Segment:
			out = append(out, seg.Data())
		case *zapv15.Segment:
			out = append(out, seg.Data())
		}
	}
	return out
}

// releaseMapped drops the index's mapped segment pages from the process
// (see above), and reclaims those of segments that already left the
// current snapshot (pageOutOthers). A failure is ignored: the pages stay
// correct, only resident.
func (s *Sink) releaseMapped() {
	s.idxMu.RLock()
	defer s.idxMu.RUnlock()
	r, err := s.snapshot()
	if err != nil {
		return
	}
	defer r.Close()
	live := map[uintptr]bool{}
	for _, b := range mappedData(r) {
		dropPages(b)
		live[start(b)] = true
	}
	pageOutOthers(s.opts.Path, live)
}

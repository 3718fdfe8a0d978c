package bleve

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dropPages removes the pages of the file mapping b from the process's
// page tables (MADV_DONTNEED). b starts where mmap placed it, at a page
// boundary. On a shared file mapping the contents are the file's: a later
// read maps the page again from the page cache.
func dropPages(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_DONTNEED)
	}
}

// pageOutOthers reclaims the resident pages of every mapping of a segment
// file under dir that does not start at one of the addresses in live:
// segments that left the index's current snapshot (merged away, deleted
// with their file) but that an older snapshot still holds open for a few
// seconds. Their pages are outside the snapshot's reach and a merge had
// just read them whole.
//
// Such a mapping may be unmapped between reading /proc/self/maps and the
// call, and its addresses reused, so it gets MADV_PAGEOUT, never
// MADV_DONTNEED: on any range that advice only reclaims (a file page is
// read again when needed, an anonymous one is swapped out if swap exists
// and otherwise left alone); it never changes what memory holds.
func pageOutOthers(dir string, live map[uintptr]bool) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		start, end, path, ok := mapsLine(sc.Text())
		if !ok || live[start] {
			continue
		}
		path = strings.TrimSuffix(path, " (deleted)")
		if !strings.HasPrefix(path, prefix) || !strings.HasSuffix(path, ".zap") {
			continue
		}
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_PAGEOUT)
	}
}

// mapsLine parses "start-end perms offset dev inode path" of
// /proc/self/maps.
func mapsLine(line string) (start, end uintptr, path string, ok bool) {
	f := strings.SplitN(line, " ", 6)
	if len(f) < 6 {
		return 0, 0, "", false
	}
	lo, hi, found := strings.Cut(f[0], "-")
	if !found {
		return 0, 0, "", false
	}
	s, err1 := strconv.ParseUint(lo, 16, 64)
	e, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return uintptr(s), uintptr(e), strings.TrimLeft(f[5], " "), true
}

// start is the address a mapped slice begins at.
func start(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

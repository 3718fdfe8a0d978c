package memtrim

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

var exe = sync.OnceValue(func() string {
	p, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return ""
	}
	return p
})

// mapping is one entry of /proc/self/smaps with the fields Trim reads.
type mapping struct {
	start, end uintptr
	writable   bool
	path       string
	rss, anon  int64 // kB
}

// clean is the executable's mappings that Trim may drop, found once: the
// loader lays them out and relocates them before main runs, and nothing
// in the process writes to a mapping that is not writable afterwards.
var clean = sync.OnceValue(func() []mapping {
	path := exe()
	if path == "" {
		return nil
	}
	maps, err := executableMappings(path)
	if err != nil {
		return nil
	}
	var out []mapping
	for _, m := range maps {
		if !m.writable && m.anon == 0 {
			out = append(out, m)
		}
	}
	return out
})

// Trim drops the executable's clean read-only pages from the page tables
// and returns the size of the address ranges it dropped.
func Trim() int64 {
	var dropped int64
	for _, m := range clean() {
		// The raw call: the range is an address the kernel reported, not
		// Go memory.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno == 0 {
			dropped += int64(m.end - m.start)
		}
	}
	return dropped
}

// executableMappings reads /proc/self/smaps and keeps the mappings of path.
func executableMappings(path string) ([]mapping, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mapping
	var cur *mapping
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if m, ok := header(line); ok {
			cur = nil
			if m.path == path {
				out = append(out, m)
				cur = &out[len(out)-1]
			}
			continue
		}
		if cur == nil {
			continue
		}
		switch {
		case bytes.HasPrefix(line, []byte("Rss:")):
			cur.rss = kB(line)
		case bytes.HasPrefix(line, []byte("Anonymous:")):
			cur.anon = kB(line)
		}
	}
	return out, sc.Err()
}

// header parses "start-end perms offset dev inode path"; ok is false for
// a field line.
func header(line []byte) (mapping, bool) {
	f := bytes.Fields(line)
	if len(f) < 5 || bytes.HasSuffix(f[0], []byte(":")) {
		return mapping{}, false
	}
	dash := bytes.IndexByte(f[0], '-')
	if dash < 0 {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(string(f[0][:dash]), 16, 64)
	end, err2 := strconv.ParseUint(string(f[0][dash+1:]), 16, 64)
	if err1 != nil || err2 != nil || len(f[1]) < 2 {
		return mapping{}, false
	}
	m := mapping{start: uintptr(start), end: uintptr(end), writable: f[1][1] == 'w'}
	if len(f) >= 6 {
		m.path = string(bytes.Join(f[5:], []byte(" ")))
	}
	return m, true
}

func kB(line []byte) int64 {
	f := bytes.Fields(line)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return n
}

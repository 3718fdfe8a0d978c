package bleve

import "golang.org/x/sys/unix"

// dropPages removes the pages of the file mapping b from the process's
// page tables (MADV_DONTNEED). b starts where mmap placed it, at a page
// boundary. On a shared file mapping the contents are the file's: a later
// read maps the page again from the page cache.
func dropPages(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_DONTNEED)
	}
}

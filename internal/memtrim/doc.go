// Package memtrim drops from the process the pages of its own executable
// that it has read but holds no copy of.
//
// The sluice binary carries DuckDB's C++ library: over 100 MiB of code and
// read-only data. Starting it runs a static initializer in each of
// DuckDB's thousands of compilation units, spread over the whole code, and
// the kernel maps 64 KiB around every page it faults in, so an idle daemon
// already counts about 60 MiB of the file in its resident set, most of it
// never run again. Those pages are clean copies of the file: dropping them
// from the page tables (MADV_DONTNEED) costs nothing, the page cache keeps
// them, and code that runs again faults them back without I/O. What stays
// resident between two trims is the code the pipeline actually runs.
//
// Only mappings of the executable that are not writable and hold no
// private (anonymous) page are dropped: the relocated read-only data the
// dynamic linker wrote before protecting it is such a private copy, and
// dropping it would bring back the file's unrelocated bytes.
package memtrim

package duckdb

// DuckDB allocates through its own jemalloc (symbols prefixed duckdb_je_),
// which by default keeps freed pages for a second before returning them
// to the system: during a 2,000,000-change drain that was tens of MiB of
// peak RSS holding pages DuckDB had already freed (bench
// pg-backlog-sinks). DuckDB writes its own options into jemalloc before
// main runs, so neither the malloc_conf symbol nor DUCKDB_JE_MALLOC_CONF
// set from Go reaches it; the decay times are writable at run time
// though, for every arena and as the default of arenas created later.
// returnFreedPages sets both to 0: freed pages go back at once, at the
// cost of a madvise per freed extent.

/*
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include <stdlib.h>

extern int duckdb_je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

static int sluice_je_decay(long long ms) {
	ssize_t v = (ssize_t)ms;
	int err = duckdb_je_mallctl("arenas.dirty_decay_ms", NULL, NULL, &v, sizeof(v));
	if (err == 0) {
		err = duckdb_je_mallctl("arenas.muzzy_decay_ms", NULL, NULL, &v, sizeof(v));
	}
	unsigned n = 0;
	size_t sz = sizeof(n);
	if (err == 0) {
		err = duckdb_je_mallctl("arenas.narenas", &n, &sz, NULL, 0);
	}
	for (unsigned i = 0; err == 0 && i < n; i++) {
		char name[64];
		// Arenas not initialized yet refuse (EFAULT); they take the
		// defaults set above when they start.
		snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", i);
		duckdb_je_mallctl(name, NULL, NULL, &v, sizeof(v));
		snprintf(name, sizeof name, "arena.%u.muzzy_decay_ms", i);
		duckdb_je_mallctl(name, NULL, NULL, &v, sizeof(v));
	}
	return err;
}

static long long sluice_je_read(const char *name) {
	ssize_t v = 0;
	size_t n = sizeof(v);
	if (duckdb_je_mallctl(name, &v, &n, NULL, 0) != 0) {
		return -2;
	}
	return (long long)v;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

var decayOnce sync.Once

// returnFreedPages sets DuckDB's allocator to return freed pages at once
// (once per process; later arenas inherit it). A failure is returned for
// logging: the sink works either way.
func returnFreedPages() (err error) {
	decayOnce.Do(func() {
		if rc := C.sluice_je_decay(0); rc != 0 {
			err = fmt.Errorf("duckdb allocator: setting the decay times failed with code %d", int(rc))
		}
	})
	return err
}

// allocatorDecay reads a decay time of DuckDB's allocator ("arenas.dirty_decay_ms",
// "arena.0.muzzy_decay_ms", …), -2 when jemalloc refuses.
func allocatorDecay(name string) int64 {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return int64(C.sluice_je_read(cs))
}

package bench

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SelfCPU is the CPU time (user + system) this process has used.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PeakRSS is this process's peak resident set (VmHWM) in bytes, since the
// start or the last ResetPeakRSS.
func PeakRSS() float64 { return peakRSSOf("self") }

// peakRSSOf is the VmHWM of /proc/<pid> in bytes, or 0.
func peakRSSOf(pid string) float64 { return procStatus(pid, "VmHWM:") }

// anonRSSOf is the RssAnon of /proc/<pid> in bytes (the resident memory
// not backed by a file: heaps, the Go runtime's and the libraries'), or
// 0. RSS beyond it is file-backed: the binary's code and files the
// process maps (an index's segments), page cache the kernel reclaims
// under pressure.
func anonRSSOf(pid string) float64 { return procStatus(pid, "RssAnon:") }

// procStatus is a "kB" field of /proc/<pid>/status in bytes, or 0.
func procStatus(pid, field string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	return 0
}

// ResetPeakRSS starts a new peak (Linux: clear_refs 5); false when the
// kernel refuses, in which case the peak covers the whole process.
func ResetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

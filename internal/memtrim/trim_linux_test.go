package memtrim

import (
	"testing"
)

func mappings(t *testing.T) map[uintptr]mapping {
	t.Helper()
	maps, err := executableMappings(exe())
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) == 0 {
		t.Fatalf("no mapping of %s in /proc/self/smaps", exe())
	}
	out := map[uintptr]mapping{}
	for _, m := range maps {
		out[m.start] = m
	}
	return out
}

// Trim drops the executable's clean pages, keeps every private copy (the
// relocated data and the writable data), and the program runs on: the
// code it runs next is faulted back.
func TestTrimDropsCleanExecutablePagesOnly(t *testing.T) {
	before := mappings(t)
	var clean int64
	for _, m := range before {
		if !m.writable && m.anon == 0 {
			clean += m.rss
		}
	}
	if clean == 0 {
		t.Fatal("the running test binary has no clean resident page")
	}
	if dropped := Trim(); dropped < clean<<10 {
		t.Fatalf("Trim dropped %d bytes with %d kB clean and resident", dropped, clean)
	}
	var cleanAfter int64
	for start, m := range mappings(t) {
		b := before[start]
		if !m.writable && m.anon == 0 {
			cleanAfter += m.rss
		}
		// A private page leaves only when dropped, and Trim must not.
		if m.anon < b.anon {
			t.Errorf("mapping %x (writable %v): %d kB private after a trim, %d before", start, m.writable, m.anon, b.anon)
		}
	}
	// Reading smaps again runs code, which faults some pages back.
	if cleanAfter >= clean {
		t.Errorf("clean resident pages %d kB after a trim, %d kB before", cleanAfter, clean)
	}
	t.Logf("clean resident %d kB before, %d kB after", clean, cleanAfter)
}

func TestHeaderParsesSmapsLines(t *testing.T) {
	for _, c := range []struct {
		line     string
		ok       bool
		start    uintptr
		writable bool
		path     string
	}{
		{"00400000-00a9a000 r--p 00000000 fe:00 10183860                           /tmp/sluice", true, 0x400000, false, "/tmp/sluice"},
		{"0731c000-074e8000 rw-p 06f1c000 fe:00 10183860   /opt/my dir/sluice (deleted)", true, 0x731c000, true, "/opt/my dir/sluice (deleted)"},
		{"7f8090844000-7f809099a000 rw-p 00000000 00:00 0 ", true, 0x7f8090844000, true, ""},
		{"Rss:               68744 kB", false, 0, false, ""},
		{"VmFlags: rd ex mr mw me dw sd", false, 0, false, ""},
	} {
		m, ok := header([]byte(c.line))
		if ok != c.ok || m.start != c.start || m.writable != c.writable || m.path != c.path {
			t.Errorf("%q: got %+v %v", c.line, m, ok)
		}
	}
	if kB([]byte("Anonymous:          7428 kB")) != 7428 {
		t.Error("kB")
	}
}

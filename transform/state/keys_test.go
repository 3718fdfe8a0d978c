package state

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)

func openKeys(t *testing.T, dir string) *Store {
	t.Helper()
	st, err := Open(Spec{What: "dedup public.outbox", Dir: dir, File: "s.db",
		Spaces: []Space{{Name: "seen", TTL: time.Minute}, {Name: "plain"}, {Name: "meta"}}, Meta: "meta"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// get reads key of space at now.
func get(t *testing.T, st *Store, now time.Time, space, key string) string {
	t.Helper()
	var out string
	err := st.View(now, func(tx *Tx) error {
		k, err := tx.Space(space)
		if err != nil {
			return err
		}
		out = string(k.Get([]byte(key)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func update(t *testing.T, st *Store, now time.Time, fn func(seen, plain *Keys) error) {
	t.Helper()
	err := st.Update(now, func(tx *Tx) error {
		seen, err := tx.Space("seen")
		if err != nil {
			return err
		}
		plain, err := tx.Space("plain")
		if err != nil {
			return err
		}
		return fn(seen, plain)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// counts returns the keys of the TTL space and of its index.
func counts(t *testing.T, st *Store) (keys, index int) {
	t.Helper()
	err := st.View(t0, func(tx *Tx) error {
		keys = tx.Bolt().Bucket([]byte("seen")).Stats().KeyN
		index = tx.Bolt().Bucket(ttlIndex("seen")).Stats().KeyN
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys, index
}

// A key of a space with a TTL lives a TTL after its last Put in the
// writes' clock: hidden past it, swept by a later write, kept when put
// again, gone from the index with a delete; a space without one keeps
// its keys; the state survives a reopen.
func TestKeysLiveTheirTTL(t *testing.T) {
	dir := t.TempDir()
	st := openKeys(t, dir)
	if _, err := st.Begin(false, []byte("def")); err != nil {
		t.Fatal(err)
	}
	update(t, st, t0, func(seen, plain *Keys) error {
		for _, k := range []string{"a", "b", "c"} {
			if err := seen.Put([]byte(k), []byte("v"+k)); err != nil {
				return err
			}
		}
		return plain.Put([]byte("p"), []byte("kept"))
	})
	// b again 30 s later: it lives until t0+90s.
	update(t, st, t0.Add(30*time.Second), func(seen, _ *Keys) error { return seen.Put([]byte("b"), []byte("vb2")) })
	// c deleted: its index entry goes too.
	update(t, st, t0.Add(40*time.Second), func(seen, _ *Keys) error { return seen.Delete([]byte("c")) })
	if k, i := counts(t, st); k != 2 || i != 2 {
		t.Fatalf("after a delete: %d keys, %d index entries", k, i)
	}
	if got := get(t, st, t0.Add(59*time.Second), "seen", "a"); got != "va" {
		t.Fatalf("a within its TTL: %q", got)
	}
	if got := get(t, st, t0.Add(60*time.Second), "seen", "a"); got != "" {
		t.Fatalf("a at its expiry: %q", got)
	}
	st.Close()
	st = openKeys(t, dir)
	defer st.Close()
	if _, err := st.Begin(true, []byte("def")); err != nil {
		t.Fatal(err)
	}
	// A write at t0+61s sweeps a, not b (put again).
	update(t, st, t0.Add(61*time.Second), func(*Keys, *Keys) error { return nil })
	if k, i := counts(t, st); k != 1 || i != 1 {
		t.Fatalf("after the sweep: %d keys, %d index entries", k, i)
	}
	if got := get(t, st, t0.Add(61*time.Second), "seen", "b"); got != "vb2" {
		t.Fatalf("b put again: %q", got)
	}
	var scanned []string
	err := st.View(t0.Add(89*time.Second), func(tx *Tx) error {
		seen, _ := tx.Space("seen")
		return seen.Scan(nil, func(k, v []byte) error { scanned = append(scanned, string(k)+"="+string(v)); return nil })
	})
	if err != nil || strings.Join(scanned, ",") != "b=vb2" {
		t.Fatalf("scan: %v %v", scanned, err)
	}
	update(t, st, t0.Add(24*time.Hour), func(*Keys, *Keys) error { return nil })
	if k, i := counts(t, st); k != 0 || i != 0 {
		t.Fatalf("a day later: %d keys, %d index entries", k, i)
	}
	if got := get(t, st, t0.Add(24*time.Hour), "plain", "p"); got != "kept" {
		t.Fatalf("a space without a TTL: %q", got)
	}
}

// A write sweeps at most sweepPerWrite expired keys per space; Get hides
// the rest until later writes take them.
func TestASweepIsBounded(t *testing.T) {
	defer func(n int) { sweepPerWrite = n }(sweepPerWrite)
	sweepPerWrite = 3
	st := openKeys(t, t.TempDir())
	defer st.Close()
	if _, err := st.Begin(false, []byte("def")); err != nil {
		t.Fatal(err)
	}
	update(t, st, t0, func(seen, _ *Keys) error {
		for i := range 10 {
			if err := seen.Put(fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	later := t0.Add(2 * time.Minute)
	for _, want := range []int{7, 4, 1, 0} {
		update(t, st, later, func(*Keys, *Keys) error { return nil })
		if k, i := counts(t, st); k != want || i != want {
			t.Fatalf("%d keys, %d index entries; want %d", k, i, want)
		}
	}
}

// Undeclared spaces are refused; a space with a TTL has no nested
// spaces; a scan tells a key with an empty value from a nested space.
func TestSpacesAreDeclared(t *testing.T) {
	st := openKeys(t, t.TempDir())
	defer st.Close()
	if _, err := st.Begin(false, []byte("def")); err != nil {
		t.Fatal(err)
	}
	err := st.Update(t0, func(tx *Tx) error {
		if _, err := tx.Space("sen"); err == nil || !strings.Contains(err.Error(), `no key space "sen"`) {
			t.Errorf("an undeclared space: %v", err)
		}
		seen, _ := tx.Space("seen")
		if _, err := seen.Nested([]byte("x")); err == nil {
			t.Error("a nested space in a space with a TTL")
		}
		plain, _ := tx.Space("plain")
		n, err := plain.Nested([]byte("x"))
		if err != nil || n.Put([]byte("k"), []byte("v")) != nil {
			t.Errorf("a nested space: %v", err)
		}
		// A scan gives keys with empty values, not nested spaces.
		if err := plain.Put([]byte("e"), nil); err != nil {
			return err
		}
		var keys []string
		if err := plain.Scan(nil, func(k, _ []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
			return err
		}
		if strings.Join(keys, ",") != "e" {
			t.Errorf("scanned %v", keys)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

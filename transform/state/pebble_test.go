package state

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

func openPebbleStore(t *testing.T, dir string) *Store {
	t.Helper()
	st, err := Open(Spec{What: "nest public.order_docs", Dir: dir, File: "join.pebble", Engine: Pebble, Replaces: "join.db",
		Spaces: []Space{{Name: "rows"}, {Name: "meta"}}, Meta: "meta"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The Pebble engine keeps the Keys contract: spaces and nested spaces
// apart (a scan of one never meets the other, nor a key of a space whose
// name extends it), a write transaction reads its own writes (scans
// too), nothing of a failed write lands, the definition and the keys
// survive a reopen, and starting over removes every key.
func TestPebbleKeepsTheKeysContract(t *testing.T) {
	dir := t.TempDir()
	st := openPebbleStore(t, dir)
	if _, err := st.Begin(false, []byte("def")); err != nil {
		t.Fatal(err)
	}
	scan := func(k *Keys, prefix string) []string {
		var out []string
		if err := k.Scan([]byte(prefix), func(key, v []byte) error {
			out = append(out, string(key)+"="+string(v))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	err := st.Update(time.Time{}, func(tx *Tx) error {
		rows, err := tx.Space("rows")
		if err != nil {
			return err
		}
		a, _ := rows.Nested([]byte("a"))
		ab, _ := rows.Nested([]byte("ab"))
		for _, kv := range [][2]string{{"k1", "1"}, {"k2", "2"}, {"j", "3"}} {
			if err := a.Put([]byte(kv[0]), []byte(kv[1])); err != nil {
				return err
			}
		}
		if err := ab.Put([]byte("k9"), []byte("9")); err != nil {
			return err
		}
		if err := rows.Put([]byte("top"), []byte("t")); err != nil {
			return err
		}
		if err := a.Delete([]byte("k2")); err != nil {
			return err
		}
		if got := scan(a, "k"); !reflect.DeepEqual(got, []string{"k1=1"}) {
			t.Errorf("own writes in a scan: %v", got)
		}
		if got := scan(rows, ""); !reflect.DeepEqual(got, []string{"top=t"}) {
			t.Errorf("a space's scan meets only its keys: %v", got)
		}
		if string(a.Get([]byte("j"))) != "3" || a.Get([]byte("k2")) != nil {
			t.Errorf("own writes in a get")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	boom := os.ErrInvalid
	if err := st.Update(time.Time{}, func(tx *Tx) error {
		rows, _ := tx.Space("rows")
		_ = rows.Put([]byte("lost"), []byte("x"))
		return boom
	}); err != boom {
		t.Fatalf("a failed write: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openPebbleStore(t, dir)
	defer st.Close()
	if string(st.Stored) != "def" {
		t.Fatalf("definition after a reopen: %q", st.Stored)
	}
	err = st.View(time.Time{}, func(tx *Tx) error {
		rows, _ := tx.Space("rows")
		if got := scan(rows.Lookup([]byte("a")), ""); !reflect.DeepEqual(got, []string{"j=3", "k1=1"}) {
			t.Errorf("after a reopen: %v", got)
		}
		if got := scan(rows.Lookup([]byte("ab")), ""); !reflect.DeepEqual(got, []string{"k9=9"}) {
			t.Errorf("a space whose name extends another's: %v", got)
		}
		if rows.Get([]byte("lost")) != nil {
			t.Error("a failed write landed")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if over, err := st.Begin(false, []byte("def2")); err != nil || !over {
		t.Fatalf("start over: %v %v", over, err)
	}
	err = st.View(time.Time{}, func(tx *Tx) error {
		rows, _ := tx.Space("rows")
		if n := rows.Lookup([]byte("a")).Len() + rows.Len(); n != 0 {
			t.Errorf("%d keys left after starting over", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() <= 0 {
		t.Fatalf("size %d", st.Size())
	}
}

// The bbolt file an earlier sluice kept the same state in is refused
// with what to do.
func TestPebbleRefusesAnEarlierStateFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "join.db"), []byte("bolt"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Spec{What: "join public.order_docs", Dir: dir, File: "join.pebble", Replaces: "join.db", Engine: Pebble, Spaces: []Space{{Name: "meta"}}, Meta: "meta"})
	if err == nil || !strings.Contains(err.Error(), "sluice run --reset-offsets") {
		t.Fatalf("got %v", err)
	}
}

// sstReads picks the reads of the state's table files, where keys live
// once flushed.
type sstReads struct{}

func (sstReads) String() string { return "reads of .sst files" }
func (sstReads) Evaluate(op errorfs.Op) bool {
	return op.Kind.ReadOrWrite() == errorfs.OpIsRead && strings.HasSuffix(op.Path, ".sst")
}

// A read of the Pebble state that fails (the disk's error, not a missing
// key) fails its transaction. Get can only answer nil, which an operator
// takes for "no such key": an Update that built on it must not commit,
// and a View must not succeed. A scan that fails returns the error. Once
// the disk reads again, the state is what it was before the fault.
func TestPebbleReadErrorFailsTheTransaction(t *testing.T) {
	fault := &errorfs.Toggle{Injector: errorfs.ErrInjected.If(sstReads{})}
	defer func(fs vfs.FS) { pebbleFS = fs }(pebbleFS)
	pebbleFS = errorfs.Wrap(vfs.Default, fault)
	dir := t.TempDir()
	st := openPebbleStore(t, dir)
	if _, err := st.Begin(false, []byte("def")); err != nil {
		t.Fatal(err)
	}
	const keys = 20000
	value := strings.Repeat("v", 200)
	err := st.Update(time.Time{}, func(tx *Tx) error {
		rows, err := tx.Space("rows")
		if err != nil {
			return err
		}
		// Many table blocks: the ones read below are not among those the
		// open reads and caches.
		for i := range keys {
			if err := rows.Put([]byte(fmt.Sprintf("k%05d", i)), []byte(value)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Flushed to a table file and read by a fresh process: the reads go
	// to the disk, not to the memtable or the block cache.
	if err := st.pdb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openPebbleStore(t, dir)
	defer st.Close()

	fault.On()
	got := "not called"
	err = st.Update(time.Time{}, func(tx *Tx) error {
		rows, err := tx.Space("rows")
		if err != nil {
			return err
		}
		v := rows.Get([]byte("k10001"))
		got = fmt.Sprintf("%q", v)
		// What an operator does with a key it takes for new.
		return rows.Put([]byte("k10001"), append(v, "+1"...))
	})
	injected := func(err error) bool { return err != nil && strings.Contains(err.Error(), "injected error") }
	if !injected(err) || !strings.Contains(err.Error(), "read the state") {
		t.Fatalf("the update over a failed read (Get gave %s) returned %v, want the read's error", got, err)
	}
	err = st.View(time.Time{}, func(tx *Tx) error {
		rows, err := tx.Space("rows")
		if err != nil {
			return err
		}
		rows.Get([]byte("k15000"))
		return nil
	})
	if !injected(err) {
		t.Fatalf("the view over a failed read returned %v, want the read's error", err)
	}
	err = st.View(time.Time{}, func(tx *Tx) error {
		rows, err := tx.Space("rows")
		if err != nil {
			return err
		}
		return rows.Scan(nil, func(key, v []byte) error { return nil })
	})
	if !injected(err) {
		t.Fatalf("the scan over failed reads returned %v, want the read's error", err)
	}

	fault.Off()
	// Pebble's file cache may hand out a table's failed open once more
	// after the fault ends (it drops the failed entry as the last reader
	// lets go of it): such a read fails its transaction again with the
	// same error, never answering a wrong value. Read until it has let go.
	check := func(tx *Tx) error {
		rows, err := tx.Space("rows")
		if err != nil {
			return err
		}
		v := rows.Get([]byte("k10001"))
		if tx.readErr != nil {
			return nil // the View returns it
		}
		if string(v) != value {
			return fmt.Errorf("k10001 holds %q after the fault, want the value before it: the failed update committed", v)
		}
		n := 0
		if err := rows.Scan(nil, func(key, v []byte) error { n++; return nil }); err != nil {
			return err
		}
		if n != keys {
			return fmt.Errorf("%d keys after the fault, want %d", n, keys)
		}
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for err = st.View(time.Time{}, check); injected(err); err = st.View(time.Time{}, check) {
		if time.Now().After(deadline) {
			t.Fatalf("reads still fail 10s after the fault ended: %v", err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

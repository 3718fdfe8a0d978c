package state

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
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

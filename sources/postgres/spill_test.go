package postgres

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
)

func TestSpillFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s, err := createSpillFile(dir, 42)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for i := 0; i < 10000; i++ {
		msg := bytes.Repeat([]byte{byte(i)}, i%300)
		want = append(want, msg)
		if err := s.append(uint32(i%7), msg); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 2; round++ { // replay is repeatable
		i := 0
		err = s.replay(func(subxid uint32, msg []byte) error {
			if subxid != uint32(i%7) || !bytes.Equal(msg, want[i]) {
				return fmt.Errorf("message %d differs", i)
			}
			i++
			return nil
		})
		if err != nil || i != len(want) {
			t.Fatalf("replay: %v after %d messages", err, i)
		}
	}
	stop := errors.New("stop")
	if err := s.replay(func(uint32, []byte) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("replay must return fn's error, got %v", err)
	}
	if err := s.remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.path); !os.IsNotExist(err) {
		t.Fatalf("spill file still present: %v", err)
	}
}

func TestSpillFileCorruptFrame(t *testing.T) {
	s, err := createSpillFile(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.remove()
	if err := s.append(1, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := s.w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(s.path, s.size-2); err != nil {
		t.Fatal(err)
	}
	if err := s.replay(func(uint32, []byte) error { return nil }); err == nil {
		t.Fatal("truncated spill file replayed without error")
	}
}

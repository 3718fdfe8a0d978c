package postgres

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// spillFile is the append-only overflow of one streamed in-progress
// transaction (Invariant 6: memory stays bounded however large the
// transaction). It stores the raw pgoutput messages as received, each with
// the (sub)transaction xid it belongs to, so replay re-decodes them exactly
// as the in-memory path would. Frame layout, big-endian:
//
//	uint32 length of message | uint32 subxid | message bytes
//
// The file lives only as long as the transaction is open: it is removed on
// Stream Commit (after replay), Stream Abort, Decoder.Reset and Close.
type spillFile struct {
	path string
	f    *os.File
	w    *bufio.Writer
	size int64 // bytes written, frames included
}

// spillFramePrefix is the per-message overhead of the frame.
const spillFramePrefix = 8

// maxSpillMessage bounds one framed message on replay; a pgoutput message
// carries at most one row (two images), far below this.
const maxSpillMessage = 1 << 30

func createSpillFile(dir string, xid uint32) (*spillFile, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, fmt.Sprintf("sluice-xid%d-*.spill", xid))
	if err != nil {
		return nil, fmt.Errorf("create spill file for xid %d: %w", xid, err)
	}
	return &spillFile{path: f.Name(), f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

// append adds one message; it is buffered until replay flushes it.
func (s *spillFile) append(subxid uint32, msg []byte) error {
	var hdr [spillFramePrefix]byte
	binary.BigEndian.PutUint32(hdr[0:4], uint32(len(msg)))
	binary.BigEndian.PutUint32(hdr[4:8], subxid)
	if _, err := s.w.Write(hdr[:]); err != nil {
		return fmt.Errorf("write spill file %s: %w", s.path, err)
	}
	if _, err := s.w.Write(msg); err != nil {
		return fmt.Errorf("write spill file %s: %w", s.path, err)
	}
	s.size += int64(spillFramePrefix + len(msg))
	return nil
}

// replay calls fn for every message in append order. Memory is bounded by
// the largest single message: the buffer handed to fn is reused, so fn must
// not keep it.
func (s *spillFile) replay(fn func(subxid uint32, msg []byte) error) error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("flush spill file %s: %w", s.path, err)
	}
	r, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("open spill file: %w", err)
	}
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [spillFramePrefix]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read spill file %s: %w", s.path, err)
		}
		n := binary.BigEndian.Uint32(hdr[0:4])
		if n > maxSpillMessage {
			return fmt.Errorf("spill file %s: corrupt frame length %d", s.path, n)
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return fmt.Errorf("read spill file %s: %w", s.path, err)
		}
		if err := fn(binary.BigEndian.Uint32(hdr[4:8]), buf); err != nil {
			return err
		}
	}
}

// remove closes and deletes the file.
func (s *spillFile) remove() error {
	cerr := s.f.Close()
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove spill file: %w", err)
	}
	if cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		return fmt.Errorf("close spill file %s: %w", s.path, cerr)
	}
	return nil
}

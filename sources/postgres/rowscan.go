package postgres

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// rowBlock is how many rows' values one allocation of cells holds.
const rowBlock = 256

// rowScanner decodes the rows of a snapshot read — a chunk, or a range of
// the initial load — made in chunkFormats: binary where binaryReadable,
// text for the rest and for the key columns. Both reads go through it, so
// a row decodes to the same values whichever read it.
type rowScanner struct {
	shape   *TableShape
	formats []int16
	// cells is the rest of a block the rows' values are cut from, one
	// allocation a rowBlock rows instead of one a row; rows of one read
	// are released together.
	cells []any
	// lastKey is the last row's key columns, raw (text): copied into the
	// same buffers each row, made a cursor only when asked.
	lastKey [][]byte
	seen    bool
}

func newRowScanner(shape *TableShape) *rowScanner {
	return &rowScanner{shape: shape, formats: chunkFormats(shape), lastKey: make([][]byte, len(shape.Table.KeyIdx))}
}

// scan decodes one row's raw values (nil: NULL). A value that does not
// decode makes bad the reason, and row is then nil; the row's key still
// becomes the last one (the row is dealt with: it goes to the dead-letter
// queue, Invariant 7).
func (s *rowScanner) scan(vals [][]byte) (row []any, bad error) {
	width := len(s.shape.Columns)
	if len(vals) != width {
		return nil, fmt.Errorf("row has %d columns, want %d", len(vals), width)
	}
	if len(s.cells) < width {
		s.cells = make([]any, width*rowBlock)
	}
	row = s.cells[:width:width]
	s.cells = s.cells[width:]
	for j, k := range s.shape.Table.KeyIdx {
		s.lastKey[j] = append(s.lastKey[j][:0], vals[k]...)
	}
	s.seen = true
	for i, raw := range vals {
		if raw == nil {
			continue
		}
		v, err := decodeChunkValue(s.shape.Columns[i], s.formats[i], raw)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", s.shape.Columns[i].Name, err)
		}
		row[i] = v
	}
	return row, nil
}

// cursor is the key of the last row scanned as a snapshot cursor (the
// JSON array of its key columns' text), nil before the first row or for a
// table without a key.
func (s *rowScanner) cursor() snapshot.Cursor {
	if !s.seen || len(s.lastKey) == 0 {
		return nil
	}
	key := make([]string, len(s.lastKey))
	for j, b := range s.lastKey {
		key[j] = string(b)
	}
	c, _ := json.Marshal(key)
	return c
}

// deadLetter is a row scan refused, with its raw values (rawRow) and the
// reason.
func (s *rowScanner) deadLetter(table string, vals [][]byte, bad error) pipeline.DeadLetter {
	raw, _ := json.Marshal(rawRow(s.shape, vals, s.formats))
	return pipeline.DeadLetter{Time: time.Now().UTC(), Stage: "source", Table: table,
		Op: pipeline.OpRead.String(), Error: fmt.Sprintf("snapshot of %s: %v", table, bad), Raw: raw}
}

// rawRow is a dead-lettered row's raw values: the text of text-format
// columns; binary timestamps and dates as their text (the value a poison
// row most often holds is a timestamp beyond what sinks take), other
// binary ones as \x and hex (the text form of bytea).
func rawRow(shape *TableShape, vals [][]byte, formats []int16) []*string {
	out := make([]*string, len(vals))
	for i, v := range vals {
		if v == nil {
			continue
		}
		s := string(v)
		if formats != nil && formats[i] == pgx.BinaryFormatCode {
			s = binaryText(shape.Columns[i].Type.decodeTarget().OID, v)
		}
		out[i] = &s
	}
	return out
}

// binaryText renders a binary date or timestamp in the ISO form (UTC for
// timestamptz) whatever its range, anything else as \x and hex.
func binaryText(oid uint32, b []byte) string {
	pgEpoch := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	switch {
	case oid == pgtype.DateOID && len(b) == 4:
		d := int32(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
		if d != math.MaxInt32 && d != math.MinInt32 {
			return pgEpoch.AddDate(0, 0, int(d)).Format("2006-01-02")
		}
	case (oid == pgtype.TimestampOID || oid == pgtype.TimestamptzOID) && len(b) == 8:
		var u uint64
		for _, c := range b {
			u = u<<8 | uint64(c)
		}
		if us := int64(u); us != math.MaxInt64 && us != math.MinInt64 {
			const day = 86_400_000_000
			days, rest := us/day, us%day
			t := pgEpoch.AddDate(0, 0, int(days)).Add(time.Duration(rest) * time.Microsecond)
			s := t.Format("2006-01-02 15:04:05.999999")
			if oid == pgtype.TimestamptzOID {
				s += "+00"
			}
			return s
		}
	}
	return `\x` + hex.EncodeToString(b)
}

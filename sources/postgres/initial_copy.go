package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// copyWriter receives COPY text output, splits it into rows and fields,
// decodes them and queues batches. Blocking in Write stops reading the
// socket, so a slow pipeline slows the COPY (Invariant 6).
type copyWriter struct {
	ctx     context.Context
	l       *snapshotLoad
	t       *loadTable
	buf     []byte // an incomplete row carried to the next Write
	batch   []pipeline.Record
	bytes   int
	err     error
	scratch []byte
	dead    []pipeline.DeadLetter
	// rng is the range being copied; last the COPY line of the batch's
	// last row, whose key becomes the range's cursor.
	rng  *snapshot.RangeProgress
	last []byte
	// cells is the rest of a block the rows' values are cut from, one
	// allocation a rowBlock rows instead of one a row.
	cells []any
}

// rowBlock is how many rows' values one allocation of cells holds.
const rowBlock = 256

func (w *copyWriter) Write(p []byte) (int, error) {
	data := p
	if len(w.buf) > 0 {
		w.buf = append(w.buf, p...)
		data = w.buf
	}
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		if err := w.row(data[:i]); err != nil {
			w.err = err
			return 0, err
		}
		data = data[i+1:]
	}
	w.buf = append(w.buf[:0], data...)
	return len(p), nil
}

func (w *copyWriter) row(line []byte) error {
	shape := w.t.shape
	width := len(shape.Columns)
	if len(w.cells) < width {
		w.cells = make([]any, width*rowBlock)
	}
	vals := w.cells[:width:width]
	w.cells = w.cells[width:]
	if w.batch == nil {
		w.batch = make([]pipeline.Record, 0, loadBatchRows) // not grown a row at a time
	}
	n := 0
	for field := range bytes.SplitSeq(line, []byte{'\t'}) {
		if n >= len(vals) {
			return fmt.Errorf("copy %s: row has more than %d fields", tableName(w.t.ref), len(vals))
		}
		if !(len(field) == 2 && field[0] == '\\' && field[1] == 'N') {
			var err error
			w.scratch, err = unescapeCopy(w.scratch[:0], field)
			if err != nil {
				return fmt.Errorf("copy %s: column %q: %w", tableName(w.t.ref), shape.Columns[n].Name, err)
			}
			v, err := DecodeText(shape.Columns[n], w.scratch)
			if err != nil {
				// Invariant 7: the row goes to the dead-letter queue with
				// its raw COPY line; the load goes on.
				w.dead = append(w.dead, pipeline.DeadLetter{Time: time.Now().UTC(), Stage: "source",
					Table: tableName(w.t.ref), Op: pipeline.OpRead.String(),
					Error: fmt.Sprintf("snapshot of %s: column %q: %v", tableName(w.t.ref), shape.Columns[n].Name, err),
					Raw:   append([]byte(nil), line...)})
				w.l.s.log.Warn("undecodable snapshot row sent to the dead-letter queue",
					zap.String("table", tableName(w.t.ref)), zap.String("column", shape.Columns[n].Name), zap.Error(err))
				w.last = append(w.last[:0], line...)
				return nil
			}
			vals[n] = v
		}
		n++
	}
	if n != len(vals) {
		return fmt.Errorf("copy %s: row has %d fields, want %d", tableName(w.t.ref), n, len(vals))
	}
	r := pipeline.Record{Op: pipeline.OpRead, Table: shape.Table, After: vals, EventTime: w.l.start,
		Version: snapshotVersion(w.l.s.gen, w.l.cp, snapshotRow), Snapshot: true}
	r.Size = pipeline.EstimateSize(&r)
	w.batch = append(w.batch, r)
	w.bytes += r.Size
	w.last = append(w.last[:0], line...)
	if len(w.batch) >= loadBatchRows || w.bytes >= loadBatchBytes {
		return w.flush(false)
	}
	return nil
}

// flush queues the rows so far; final ends the range (queued even
// without rows, so that it is handed over as complete).
func (w *copyWriter) flush(final bool) error {
	if len(w.batch) == 0 && len(w.dead) == 0 && !final {
		return nil
	}
	it := loadItem{b: pipeline.Batch{Records: w.batch, Bytes: w.bytes, Dead: w.dead}, t: w.t, rng: w.rng, final: final}
	if len(w.last) > 0 && len(w.t.shape.Table.KeyIdx) > 0 {
		cur, err := w.cursor()
		if err != nil {
			return err
		}
		it.last = cur
	}
	select {
	case w.l.out <- it:
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
	n := int64(len(w.batch))
	w.t.rows.Add(n)
	w.t.rowsDone.Add(float64(n))
	w.batch, w.bytes, w.dead, w.last = nil, 0, nil, w.last[:0]
	return nil
}

// cursor is the key of the last row (w.last) as a ChunkReader cursor:
// its key columns' text, as COPY printed them.
func (w *copyWriter) cursor() (snapshot.Cursor, error) {
	var fields [][]byte
	for f := range bytes.SplitSeq(w.last, []byte{'\t'}) {
		fields = append(fields, f)
	}
	vals := make([]string, 0, len(w.t.shape.Table.KeyIdx))
	for _, k := range w.t.shape.Table.KeyIdx {
		if k >= len(fields) {
			return nil, fmt.Errorf("copy %s: a row has %d fields", tableName(w.t.ref), len(fields))
		}
		txt, err := unescapeCopy(nil, fields[k])
		if err != nil {
			return nil, err
		}
		vals = append(vals, string(txt))
	}
	return json.Marshal(vals)
}

// unescapeCopy decodes one field of COPY text format: \b \f \n \r \t \v,
// \\, \ddd (1–3 octal digits), \xhh (1–2 hex digits); a backslash before
// any other character stands for that character.
func unescapeCopy(dst, field []byte) ([]byte, error) {
	for i := 0; i < len(field); i++ {
		c := field[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		if i >= len(field) {
			return dst, errors.New("field ends with a lone backslash")
		}
		c = field[i]
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'v':
			dst = append(dst, '\v')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(c - '0')
			for k := 0; k < 2 && i+1 < len(field) && field[i+1] >= '0' && field[i+1] <= '7'; k++ {
				i++
				v = v*8 + int(field[i]-'0')
			}
			dst = append(dst, byte(v))
		case 'x':
			v, digits := 0, 0
			for digits < 2 && i+1 < len(field) && isHex(field[i+1]) {
				i++
				v = v*16 + hexVal(field[i])
				digits++
			}
			if digits == 0 {
				dst = append(dst, 'x')
			} else {
				dst = append(dst, byte(v))
			}
		default:
			dst = append(dst, c)
		}
	}
	return dst, nil
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return int(c-'A') + 10
}

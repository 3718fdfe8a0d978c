package postgres

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/jackc/pglogrepl"
	"go.uber.org/zap"
)

// Streamed in-progress transactions (pgoutput protocol v2, streaming on):
// their changes are buffered per transaction, spilled to disk past the
// memory threshold, replayed in order at Stream Commit with the commit's
// versions, and dropped at Stream Abort.

// bufferStreamed keeps a change (or Relation, or transactional logical)
// message of the open stream
// block for its transaction. Messages are kept raw and decoded at Stream
// Commit, so Relation messages of the stream shape exactly the changes that
// follow them, in commit order.
func (d *Decoder) bufferStreamed(walData []byte, walStart pglogrepl.LSN) error {
	sb := d.streams[d.streamXid]
	if sb == nil || len(walData) < 5 {
		return &DecodeError{WALStart: walStart, Err: errors.New("streamed change outside a stream block")}
	}
	subxid := binary.BigEndian.Uint32(walData[1:5])
	if sb.file != nil {
		return d.spillAppend(sb, subxid, walData)
	}
	data := append([]byte(nil), walData...) // the caller may reuse walData
	sb.mem = append(sb.mem, bufferedMsg{subxid: subxid, data: data})
	sz := int64(len(data) + bufferedOverhead)
	sb.memSize += sz
	d.memBytes += sz
	// Invariant 6: streamed transactions beyond the memory budget go to disk.
	if d.memBytes > d.opts.SpillThreshold {
		if err := d.spill(sb); err != nil {
			return err
		}
	}
	d.updateStreamStats()
	return nil
}

// spill moves sb's in-memory messages to its spill file; later messages of
// the transaction go straight to the file.
func (d *Decoder) spill(sb *streamBuf) error {
	f, err := createSpillFile(d.opts.SpillDir, sb.xid)
	if err != nil {
		return err
	}
	sb.file = f
	// Invariant 9: spilling delays delivery; it is logged and counted.
	d.log.Info("streamed transaction spills to disk", zap.Uint32("xid", sb.xid), zap.String("file", f.path),
		zap.Int64("buffered_bytes", d.memBytes))
	for _, m := range sb.mem {
		if err := d.spillAppend(sb, m.subxid, m.data); err != nil {
			return err
		}
	}
	d.memBytes -= sb.memSize
	sb.mem, sb.memSize = nil, 0
	d.mu.Lock()
	d.stats.SpillFiles++
	d.mu.Unlock()
	return nil
}

func (d *Decoder) spillAppend(sb *streamBuf, subxid uint32, data []byte) error {
	before := sb.file.size
	if err := sb.file.append(subxid, data); err != nil {
		return err
	}
	d.mu.Lock()
	d.stats.SpillBytes += sb.file.size - before
	d.stats.SpilledTotal += sb.file.size - before
	d.mu.Unlock()
	return nil
}

func (d *Decoder) updateStreamStats() {
	d.mu.Lock()
	d.stats.OpenStreams, d.stats.BufferedBytes = len(d.streams), d.memBytes
	d.mu.Unlock()
}

// dropStream forgets a streamed transaction and removes its spill file.
func (d *Decoder) dropStream(sb *streamBuf) {
	d.memBytes -= sb.memSize
	sb.mem, sb.memSize = nil, 0
	if sb.file != nil {
		if err := sb.file.remove(); err != nil {
			d.log.Warn("spill file not removed", zap.Error(err))
		}
		d.mu.Lock()
		d.stats.SpillFiles--
		d.stats.SpillBytes -= sb.file.size
		d.mu.Unlock()
		sb.file = nil
	}
	delete(d.streams, sb.xid)
	d.updateStreamStats()
}

// streamAbort drops a streamed transaction, or only one subtransaction's
// changes when SubXid differs from Xid. Relation messages are kept: the
// server does not resend a relation it already described for the
// transaction, even when the subtransaction that carried it aborted.
func (d *Decoder) streamAbort(m *pglogrepl.StreamAbortMessageV2) {
	sb := d.streams[m.Xid]
	if sb == nil {
		return
	}
	if m.SubXid == m.Xid || m.SubXid == 0 {
		d.dropStream(sb)
		return
	}
	if sb.file != nil {
		if sb.aborted == nil {
			sb.aborted = map[uint32]bool{}
		}
		sb.aborted[m.SubXid] = true
		return
	}
	kept := sb.mem[:0]
	for _, b := range sb.mem {
		if b.subxid == m.SubXid && pglogrepl.MessageType(b.data[0]) != pglogrepl.MessageTypeRelation {
			sz := int64(len(b.data) + bufferedOverhead)
			sb.memSize -= sz
			d.memBytes -= sz
			continue
		}
		kept = append(kept, b)
	}
	clear(sb.mem[len(kept):])
	sb.mem = kept
	d.updateStreamStats()
}

// streamCommit replays a streamed transaction in order at its commit LSN,
// in chunks, and removes its buffers.
func (d *Decoder) streamCommit(ctx context.Context, m *pglogrepl.StreamCommitMessageV2, walStart pglogrepl.LSN, emit func(Chunk) error) error {
	tx := &txnState{xid: m.Xid, commitLSN: m.CommitLSN, commitTime: m.CommitTime}
	sb := d.streams[m.Xid]
	if sb != nil {
		defer d.dropStream(sb)
		replay := func(subxid uint32, data []byte) error {
			isRel := pglogrepl.MessageType(data[0]) == pglogrepl.MessageTypeRelation
			if sb.aborted[subxid] && !isRel {
				return nil
			}
			msg, err := parseMessage(data, true)
			if err != nil {
				return &DecodeError{WALStart: walStart, Err: err}
			}
			switch m := msg.(type) {
			case *pglogrepl.RelationMessageV2:
				return d.applyRelation(ctx, &m.RelationMessage, walStart)
			case *pglogrepl.LogicalDecodingMessageV2:
				return d.txMessage(tx, &m.LogicalDecodingMessage, emit)
			}
			return d.change(ctx, tx, msg, data, walStart, emit)
		}
		for _, b := range sb.mem {
			if err := replay(b.subxid, b.data); err != nil {
				return err
			}
		}
		if sb.file != nil {
			if err := sb.file.replay(replay); err != nil {
				return err
			}
		}
	}
	if err := d.settle(ctx, tx, emit); err != nil {
		return err
	}
	return d.flush(tx, true, m.TransactionEndLSN, emit)
}

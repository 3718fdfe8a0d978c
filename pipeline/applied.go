package pipeline

import (
	"encoding/binary"
	"errors"
)

// PositionOrder is a source's order of positions across generations and
// servers (mysql.Covers): whether the transaction that ends at pos (a
// record's Pos) is within mark (an earlier record's Pos, from any
// generation or server). False when it cannot tell, which only ever
// means "not known to be covered". It must not block.
type PositionOrder func(pos, mark Position) bool

// Applied is the newest stream change a stateful stage applied, stored
// with its state: with Invariant 5's state ahead of the checkpoint, a
// change at or below it is a replay the state already holds. A replay of
// a later generation (a run resumed on another server: its versions lead
// with a higher generation and that server's positions) sorts above it;
// Pos and TxID let the source's PositionOrder recognise it instead
// (Replayed).
type Applied struct {
	Version Version
	Pos     Position
	TxID    uint64
}

// Replayed reports whether stream change r is one a holds: at or below
// its version, or, for a change of a later generation, within its
// position by order, unless r is a later change of a's own transaction
// (same TxID, higher index; TxID alone names the transaction, so a
// coincidence only takes a replay for new). Without order, or a
// position on either side, a later generation's change is new.
func (a Applied) Replayed(r *Record, order PositionOrder) bool {
	if !a.Version.Less(r.Version) {
		return true
	}
	return order != nil && r.Version[0] > a.Version[0] && a.Pos != nil && r.Pos != nil &&
		order(r.Pos, a.Pos) && (r.TxID != a.TxID || r.Version[3] <= a.Version[3])
}

// Before reports whether the change a describes came before stream change
// r in the source, so that no run resuming at or before r replays it:
// within a generation by version; for a of an earlier generation (r
// replayed from another server, or after a cut-short run) by order,
// within r's position and not r's own transaction from r's index on, and
// false when a position is missing (not known to be before). Without an
// order a replay from another generation is never recognised as one, so
// nothing kept of an earlier generation would be looked up again: true.
func (a Applied) Before(r *Record, order PositionOrder) bool {
	switch {
	case a.Version[0] == r.Version[0]:
		return a.Version.Less(r.Version)
	case a.Version[0] > r.Version[0]:
		return false
	case order == nil:
		return true
	}
	return a.Pos != nil && r.Pos != nil && order(a.Pos, r.Pos) && (a.TxID != r.TxID || a.Version[3] < r.Version[3])
}

// AppliedOf returns r as the newest applied change.
func AppliedOf(r *Record) Applied { return Applied{Version: r.Version, Pos: r.Pos, TxID: r.TxID} }

// AppendBinary appends a's stored form: the version (32 bytes), the TxID
// (uvarint) and the position.
func (a Applied) AppendBinary(b []byte) []byte {
	for _, c := range a.Version {
		b = binary.BigEndian.AppendUint64(b, c)
	}
	b = binary.AppendUvarint(b, a.TxID)
	return append(b, a.Pos...)
}

// ParseApplied reads what AppendBinary wrote; 32 bytes alone (a version,
// as stages stored it before positions) read as that version.
func ParseApplied(b []byte) (Applied, error) {
	var a Applied
	if len(b) < 32 {
		return a, errors.New("applied: shorter than a version")
	}
	for i := range a.Version {
		a.Version[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	if len(b) == 32 {
		return a, nil
	}
	tx, n := binary.Uvarint(b[32:])
	if n <= 0 {
		return a, errors.New("applied: bad transaction id")
	}
	a.TxID = tx
	if rest := b[32+n:]; len(rest) > 0 {
		a.Pos = append(Position(nil), rest...)
	}
	return a, nil
}

package postgres

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/pipeline"
)

// PhaseStream is the only phase a Postgres position records. The exported
// snapshot load is not resumable (its snapshot dies with its transactions), so
// every batch of a load carries a nil position and the first checkpointable
// position is the stream position at the slot's consistent point, handed over
// after the last snapshot row (Invariant 3: the stream starts exactly at the
// snapshot's position).
const PhaseStream = "stream"

// Position is the resume token of the Postgres source:
//
//	{"phase":"stream","slot":"sluice_shop","lsn":"0/16B3748","system_id":"7312…"}
//
// LSN is the end LSN of the last transaction whose records are durable
// (Invariant 2: positions sit on transaction boundaries). Restarting from it
// re-delivers exactly the transactions that commit after it. SystemID is the
// database system identifier of the server the slot lives on; it guards
// against resuming a checkpoint against a different cluster (a restored
// backup or a new server behind the same address).
type Position struct {
	Phase    string
	Slot     string
	LSN      pglogrepl.LSN
	SystemID string
	// Generation leads every version (Invariant 10).
	Generation uint64
}

type positionJSON struct {
	Phase      string `json:"phase"`
	Slot       string `json:"slot"`
	LSN        string `json:"lsn"`
	SystemID   string `json:"system_id,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
}

var systemIDPattern = regexp.MustCompile(`^[0-9]{1,20}$`)

// Encode returns the JSON form of p.
func (p Position) Encode() pipeline.Position {
	b, err := json.Marshal(positionJSON{Phase: p.Phase, Slot: p.Slot, LSN: p.LSN.String(), SystemID: p.SystemID, Generation: p.Generation})
	if err != nil { // cannot happen: only strings
		panic(err)
	}
	return b
}

// Validate checks the fields of p.
func (p Position) Validate() error {
	if p.Phase != PhaseStream {
		return fmt.Errorf("phase %q: want %q", p.Phase, PhaseStream)
	}
	if !slotPattern.MatchString(p.Slot) {
		return fmt.Errorf("slot %q: not a replication slot name (lower-case letters, digits and underscores, at most 63)", p.Slot)
	}
	if p.LSN == 0 {
		return errors.New("lsn 0/0: a position always names a real WAL location")
	}
	if p.SystemID != "" && !systemIDPattern.MatchString(p.SystemID) {
		return fmt.Errorf("system_id %q: want the decimal database system identifier", p.SystemID)
	}
	return nil
}

// ParsePosition reads and validates a position made by Encode.
func ParsePosition(b pipeline.Position) (Position, error) {
	var j positionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Position{}, fmt.Errorf("postgres position %s: %w", quoteShort(b), err)
	}
	lsn, err := parseLSN(j.LSN)
	if err != nil {
		return Position{}, fmt.Errorf("postgres position %s: lsn: %w", quoteShort(b), err)
	}
	p := Position{Phase: j.Phase, Slot: j.Slot, LSN: lsn, SystemID: j.SystemID, Generation: j.Generation}
	if err := p.Validate(); err != nil {
		return Position{}, fmt.Errorf("postgres position %s: %w", quoteShort(b), err)
	}
	return p, nil
}

// parseLSN is pglogrepl.ParseLSN made strict: exactly "X/Y" with 1–8 hex
// digits on each side, so a position never round-trips to a different value.
func parseLSN(s string) (pglogrepl.LSN, error) {
	if !lsnPattern.MatchString(s) {
		return 0, fmt.Errorf("%q is not an LSN (want hex digits like 0/16B3748)", s)
	}
	hi, lo := s, ""
	for i := range s {
		if s[i] == '/' {
			hi, lo = s[:i], s[i+1:]
			break
		}
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, err
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, err
	}
	return pglogrepl.LSN(h<<32 | l), nil
}

var lsnPattern = regexp.MustCompile(`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`)

func quoteShort(b []byte) string {
	const max = 200
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "…"
	}
	return strconv.Quote(string(b))
}

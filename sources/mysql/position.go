package mysql

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Flavors of server.
const (
	FlavorMariaDB = "mariadb"
	FlavorMySQL   = "mysql"
)

// Position is the resume token of the binlog source:
//
//	{"flavor":"mariadb","gtid":"0-1-42","file":"mysql-bin.000003","pos":1234,
//	 "server":"server_id=1","epoch":0}
//
// GTID is the set of transactions whose records are durable (MySQL: a GTID
// set; MariaDB: one domain-server-seq per domain). File and Pos are the end
// of the last of them: they only ever sit on a commit (an XID event, a
// COMMIT query or a standalone DDL), never on a GTID/BEGIN event
// (Invariant 2). Resuming sends the server the GTID, so the stream carries
// on from exactly the next transaction even when file names differ after a
// failover; File and Pos feed the versions and the lag.
//
// Server names the server the binlog came from (MySQL: @@server_uuid;
// MariaDB: server_id=N). Epoch increases each time it changes: file numbers
// and offsets of two servers are not comparable, so every version the new
// server produces must sort above the old server's (DESIGN "Versions").
type Position struct {
	Flavor string
	GTID   string
	File   string
	Pos    uint32
	Server string
	Epoch  uint64
}

type positionJSON struct {
	Flavor string `json:"flavor"`
	GTID   string `json:"gtid"`
	File   string `json:"file"`
	Pos    uint32 `json:"pos"`
	Server string `json:"server,omitempty"`
	Epoch  uint64 `json:"epoch"`
}

// Encode returns the JSON form of p.
func (p Position) Encode() pipeline.Position {
	b, err := json.Marshal(positionJSON{Flavor: p.Flavor, GTID: p.GTID, File: p.File, Pos: p.Pos, Server: p.Server, Epoch: p.Epoch})
	if err != nil { // cannot happen: strings and numbers
		panic(err)
	}
	return b
}

// Validate checks the fields of p, including that GTID parses.
func (p Position) Validate() error {
	if p.Flavor != FlavorMariaDB && p.Flavor != FlavorMySQL {
		return fmt.Errorf("flavor %q: want %q or %q", p.Flavor, FlavorMariaDB, FlavorMySQL)
	}
	if _, err := p.gtidSet(); err != nil {
		return fmt.Errorf("gtid %q: %w", p.GTID, err)
	}
	if p.File != "" {
		if _, err := fileNumber(p.File); err != nil {
			return err
		}
	}
	return nil
}

// gtidSet parses GTID in the position's flavor.
func (p Position) gtidSet() (gomysql.GTIDSet, error) {
	return gomysql.ParseGTIDSet(p.Flavor, p.GTID)
}

// ParsePosition reads and validates a position made by Encode.
func ParsePosition(b pipeline.Position) (Position, error) {
	var j positionJSON
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return Position{}, fmt.Errorf("mysql position %s: %w (is the checkpoint from another source kind?)", quoteShort(b), err)
	}
	p := Position{Flavor: j.Flavor, GTID: j.GTID, File: j.File, Pos: j.Pos, Server: j.Server, Epoch: j.Epoch}
	if err := p.Validate(); err != nil {
		return Position{}, fmt.Errorf("mysql position %s: %w", quoteShort(b), err)
	}
	return p, nil
}

// fileNumber is the numeric suffix of a binlog file name
// ("mysql-bin.000123" → 123), the second component of a version.
func fileNumber(name string) (uint64, error) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 || i == len(name)-1 {
		return 0, fmt.Errorf("binlog file %q: want a name ending in .NNNNNN", name)
	}
	n, err := strconv.ParseUint(name[i+1:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("binlog file %q: want a name ending in .NNNNNN", name)
	}
	return n, nil
}

// Row indexes in versions (docs/versions.md). A snapshot's table barrier
// and rows sit at the snapshot's own binlog offset with indexes 0 and 1;
// every row of a transaction that starts at or after that offset has an
// index of at least rowBase, so it sorts above the snapshot (Invariant 3
// and 4).
const (
	barrierIndex = 0
	snapshotRow  = 1
	rowBase      = 2
)

// streamVersion is the version of the i-th row change of the transaction
// that starts at txStart in file.
func streamVersion(epoch, file uint64, txStart uint32, i int) pipeline.Version {
	return pipeline.Version{epoch, file, uint64(txStart), uint64(rowBase + i)}
}

// errPurged marks a checkpoint the server can no longer serve.
var errPurged = errors.New("binlog purged")

// errDiverged marks a checkpoint a server reached after a failover cannot
// serve: it lacks transactions the pipeline read from the old one
// (Invariant 9: a gap is reported, never skipped).
var errDiverged = errors.New("the new server lacks transactions already read")

// errSessionOver refuses a binlog session's connections once it is over.
var errSessionOver = errors.New("the binlog session is over")

func quoteShort(b []byte) string {
	const max = 200
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "…"
	}
	return strconv.Quote(string(b))
}

// Covers reports whether the transaction that ends at pos (a record's
// Pos) is one of those mark's GTID set holds: it was read at or before
// mark on whichever server, since GTIDs name a transaction on every
// server that replicated it, where files and offsets do not. False when
// it cannot tell (a position that does not parse, another flavor),
// which only ever means "not known to be covered". Exactly-once Kafka
// uses it to recognise what a run on another server replays
// (docs/versions.md, "Exactly-once Kafka").
//
// A MariaDB position holds one GTID per domain, and sequence numbers
// alone do not tell two histories apart: a replica promoted without the
// primary's last transactions (0-1-41, 0-1-42) numbers its own 0-2-41,
// 0-2-42. So every domain of pos must be in mark with the same server id
// and a sequence number no higher; a replay whose window spans a change
// of primary is then not known to be covered, and is written again.
func Covers(pos, mark pipeline.Position) bool {
	p, err := ParsePosition(pos)
	if err != nil || p.GTID == "" {
		return false
	}
	m, err := ParsePosition(mark)
	if err != nil || m.GTID == "" || m.Flavor != p.Flavor {
		return false
	}
	ps, err := p.gtidSet()
	if err != nil {
		return false
	}
	ms, err := m.gtidSet()
	if err != nil {
		return false
	}
	pm, ok1 := ps.(*gomysql.MariadbGTIDSet)
	mm, ok2 := ms.(*gomysql.MariadbGTIDSet)
	if !ok1 || !ok2 {
		return ms.Contain(ps) // MySQL: server UUIDs tell histories apart
	}
	for d, g := range pm.Sets {
		h, ok := mm.Sets[d]
		if !ok || h.ServerID != g.ServerID || h.SequenceNumber < g.SequenceNumber {
			return false
		}
	}
	return true
}

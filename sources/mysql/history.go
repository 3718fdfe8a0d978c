package mysql

import (
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// errHistory marks a checkpoint taken on a binlog history the server no
// longer has: RESET MASTER (RESET BINARY LOGS AND GTIDS), or a restore of
// the server from a backup. GTIDs start over after it, so resuming by GTID
// would skip the new history's transactions up to the checkpoint's
// numbers, and their binlog files and offsets sort below what the sinks
// hold (docs/versions.md).
var errHistory = errors.New("binlog history reset")

// checkSameHistory fails when the server's binlog is not the history p was
// taken on, which resuming by GTID cannot see. MariaDB: the binlog file
// p names must still say, at p's offset, the GTID position p records (when
// the file is gone, a newest file numbered below it means the numbering
// started over). MySQL: p's GTID set must be part of gtid_executed.
func checkSameHistory(c *client.Conn, srv *Server, p Position) error {
	fail := func(what string) error {
		return fmt.Errorf("%w: the checkpoint (gtid %q at %s:%d) was taken on a binlog history this server no longer has: %s "+
			"(RESET MASTER, or a restore from a backup); the changes since are unknown to this pipeline: take a new snapshot with sluice run --reset-offsets",
			errHistory, p.GTID, p.File, p.Pos, what)
	}
	if !srv.MariaDB {
		if p.GTID == "" {
			return nil
		}
		r, err := c.Execute("SELECT GTID_SUBSET(?, @@GLOBAL.gtid_executed), @@GLOBAL.gtid_executed", p.GTID)
		if err != nil {
			return fmt.Errorf("mysql source: compare the checkpoint with gtid_executed: %w", err)
		}
		defer r.Close()
		if ok, _ := r.GetInt(0, 0); ok == 0 {
			executed, _ := getString(r, 0, 1)
			return fail(fmt.Sprintf("its gtid_executed is %q", executed))
		}
		return nil
	}
	if p.File == "" {
		return nil
	}
	logs, err := c.Execute("SHOW BINARY LOGS")
	if err != nil {
		return fmt.Errorf("mysql source: list the binary logs: %w", err)
	}
	var newest string
	found := false
	for i := range logs.Values {
		name, _ := getString(logs, i, 0)
		found = found || name == p.File
		newest = name
	}
	logs.Close()
	if !found {
		want, err1 := fileNumber(p.File)
		have, err2 := fileNumber(newest)
		if err1 == nil && err2 == nil && have < want {
			return fail(fmt.Sprintf("its newest binlog file is %s", newest))
		}
		return nil // purged: checkNotPurged reports it
	}
	r, err := c.Execute("SELECT BINLOG_GTID_POS(?, ?)", p.File, p.Pos)
	if err != nil {
		return fmt.Errorf("mysql source: read the GTID position at the checkpoint's offset: %w", err)
	}
	defer r.Close()
	there, _ := getString(r, 0, 0)
	at, err1 := gomysql.ParseMariadbGTIDSet(there)
	want, err2 := gomysql.ParseMariadbGTIDSet(p.GTID)
	if err1 != nil || err2 != nil {
		return fail(fmt.Sprintf("the offset holds GTID position %q", there))
	}
	a, w := at.(*gomysql.MariadbGTIDSet), want.(*gomysql.MariadbGTIDSet)
	for domain, g := range w.Sets {
		if mine := a.Sets[domain]; mine == nil || mine.SequenceNumber != g.SequenceNumber || mine.ServerID != g.ServerID {
			return fail(fmt.Sprintf("the offset holds GTID position %q", there))
		}
	}
	return nil
}

package mysql

import (
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

func TestCoversComparesGTIDsNotFiles(t *testing.T) {
	maria := func(gtid, file string, epoch uint64) pipeline.Position {
		return Position{Flavor: FlavorMariaDB, GTID: gtid, File: file, Pos: 4, Epoch: epoch}.Encode()
	}
	mysql := func(gtid string) pipeline.Position {
		return Position{Flavor: FlavorMySQL, GTID: gtid, File: "binlog.000001", Pos: 4}.Encode()
	}
	const a, b = "3E11FA47-71CA-11E1-9E33-C80AA9429562", "4E11FA47-71CA-11E1-9E33-C80AA9429562"
	for _, c := range []struct {
		name      string
		pos, mark pipeline.Position
		want      bool
	}{
		{"an earlier transaction, read from another server", maria("0-1-40", "mysql-bin.000001", 1), maria("0-1-42", "mysql-bin.000006", 0), true},
		{"the mark's own transaction", maria("0-1-42", "mysql-bin.000001", 1), maria("0-1-42", "mysql-bin.000006", 0), true},
		{"a later one", maria("0-2-43", "mysql-bin.000001", 1), maria("0-1-42", "mysql-bin.000006", 0), false},
		{"another server's sequence numbers (a replica promoted without the last transactions)", maria("0-2-41", "mysql-bin.000001", 1), maria("0-1-42", "mysql-bin.000006", 0), false},
		{"a primary change inside the window", maria("0-2-40", "mysql-bin.000001", 1), maria("0-1-42", "mysql-bin.000006", 0), false},
		{"a domain the mark lacks", maria("0-1-40,1-2-3", "mysql-bin.000001", 1), maria("0-1-42", "mysql-bin.000006", 0), false},
		{"two domains within the mark", maria("0-1-40,1-2-3", "mysql-bin.000001", 1), maria("0-1-42,1-2-9", "mysql-bin.000006", 0), true},
		{"MySQL: within the set", mysql(a + ":1-40"), mysql(a + ":1-42"), true},
		{"MySQL: the new primary's own transaction", mysql(a + ":1-42," + b + ":1"), mysql(a + ":1-42"), false},
		{"MySQL: beyond the set", mysql(a + ":1-43"), mysql(a + ":1-42"), false},
		{"another flavor", mysql(a + ":1-40"), maria("0-1-42", "mysql-bin.000006", 0), false},
		{"not a position", pipeline.Position(`{"lsn":"0/1"}`), maria("0-1-42", "mysql-bin.000006", 0), false},
	} {
		if got := Covers(c.pos, c.mark); got != c.want {
			t.Errorf("%s: Covers(%s, %s) = %v, want %v", c.name, c.pos, c.mark, got, c.want)
		}
	}
}

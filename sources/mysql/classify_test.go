package mysql

import (
	"errors"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
)

// The server refusing to send the binlog from the checkpoint is a purge
// on the server the position came from, and after a failover a new
// primary that lacks what the pipeline read: each error says which, and
// both stop the pipeline.
func TestClassifyTellsADivergedFailoverFromAPurge(t *testing.T) {
	refusal := &gomysql.MyError{Code: gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG,
		Message: "connecting slave requested to start from GTID 0-1-4040, which is not in the master's binlog"}
	at := &Position{GTID: "0-1-4040", Server: "server_id=1"}
	err := classify(refusal, at, "server_id=1")
	if !errors.Is(err, errPurged) || !pipeline.IsFatal(err) || !strings.Contains(err.Error(), "--reset-offsets") {
		t.Fatalf("same server: %v", err)
	}
	moved := &Position{GTID: "0-1-4040", Server: "server_id=2"}
	err = classify(refusal, moved, "server_id=1")
	if !errors.Is(err, errDiverged) || errors.Is(err, errPurged) || !pipeline.IsFatal(err) {
		t.Fatalf("after a failover: %v", err)
	}
	for _, want := range []string{"server_id=1", "server_id=2", "0-1-4040", "--reset-offsets", "lacks transactions"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("after a failover: %q does not say %q", err, want)
		}
	}
	other := errors.New("connection reset")
	if classify(other, moved, "server_id=1") != other {
		t.Fatal("a connection error is not a refusal")
	}
}

// The two ways a schema change ends the initial load are marked for a
// restart, which resumes the load in chunks; other server errors are
// left as they are.
func TestGaveWayMarksSchemaChangesForARestart(t *testing.T) {
	for _, c := range []struct {
		code    uint16
		restart bool
		says    string
	}{
		{gomysql.ER_LOCK_WAIT_TIMEOUT, true, "waits for the table"},
		{gomysql.ER_TABLE_DEF_CHANGED, true, "rebuilt the table"},
		{gomysql.ER_NO_SUCH_TABLE, false, ""},
	} {
		err := gaveWay(&gomysql.MyError{Code: c.code, Message: "server says"})
		if pipeline.IsRestart(err) != c.restart || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "server says") {
			t.Errorf("code %d: %v (restart %v), want restart %v saying %q", c.code, err, pipeline.IsRestart(err), c.restart, c.says)
		}
	}
	if err := gaveWay(errors.New("connection reset")); pipeline.IsRestart(err) {
		t.Errorf("%v marked for a restart", err)
	}
}

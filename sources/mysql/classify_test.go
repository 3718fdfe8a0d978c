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

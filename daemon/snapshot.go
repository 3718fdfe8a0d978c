package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// SnapshotPath is where the daemon takes snapshot requests.
const SnapshotPath = "/snapshot"

// SnapshotRequest is the body of a POST to SnapshotPath.
type SnapshotRequest struct {
	Table string `json:"table"` // schema.table (database.table for MySQL)
	Where string `json:"where,omitempty"`
	// Keys asks for a repair instead (snapshot.Engine.RequestKeys): each
	// key's columns in textform, in key order.
	Keys [][]string `json:"keys,omitempty"`
}

// SnapshotAccepted is the answer to an accepted request.
type SnapshotAccepted struct {
	Run string `json:"run"`
}

// snapshotHandler queues a re-snapshot of one table while the stream
// flows (snapshot.Engine.Request), or a repair of chosen keys
// (snapshot.Engine.RequestKeys).
func snapshotHandler(eng *snapshot.Engine) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a JSON body {\"table\": \"schema.table\", \"where\": \"optional SQL condition\"}", http.StatusMethodNotAllowed)
			return
		}
		var req SnapshotRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
			http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		schema, name, ok := strings.Cut(req.Table, ".")
		if !ok || schema == "" || name == "" {
			http.Error(w, fmt.Sprintf("table %q: want schema.table", req.Table), http.StatusBadRequest)
			return
		}
		id := pipeline.TableID{Schema: schema, Table: name}
		var run string
		var err error
		switch {
		case req.Keys != nil && req.Where != "":
			http.Error(w, "a request has keys or a where condition, not both", http.StatusBadRequest)
			return
		case req.Keys != nil:
			run, err = eng.RequestKeys(id, req.Keys)
		default:
			run, err = eng.Request(id, req.Where)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(SnapshotAccepted{Run: run})
	})
}

package postgres

import (
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// harnessPG runs the conformance suite with a fresh schema per target.
type harnessPG struct {
	dsn, schema string
	cur         *Sink
}

func (h *harnessPG) Open(t *testing.T) pipeline.Sink {
	h.schema = freshSchema()
	h.cur = New(Options{DSN: h.dsn, Schema: h.schema}, nil)
	return h.cur
}

func (h *harnessPG) Reopen(t *testing.T) pipeline.Sink {
	h.cur = New(Options{DSN: h.dsn, Schema: h.schema}, nil)
	return h.cur
}

func (h *harnessPG) Read(t *testing.T, table *pipeline.Table) map[string][]any {
	t.Helper()
	rows, err := h.cur.Rows(ctx, table)
	if err != nil {
		t.Fatalf("read %s: %v", table.ID, err)
	}
	out := make(map[string][]any, len(rows))
	for _, r := range rows {
		out[sinktest.RowKey(table, r)] = r
	}
	return out
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, &harnessPG{dsn: server(t).DSN("postgres")})
}

func TestMatrix(t *testing.T) {
	sinktest.Matrix(t, &harnessPG{dsn: server(t).DSN("postgres")}, "Postgres sink", "../../docs/types/postgres.md")
}

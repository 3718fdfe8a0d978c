package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// decTestPub is the publication every decoder test replicates.
const decTestPub = "sluice_dec_pub"

// replEnv is a database with a publication of all its tables and a
// temporary logical slot created before any test WAL is written.
type replEnv struct {
	t       *testing.T
	pg      *harness.Postgres
	db      string
	conn    *pgconn.PgConn
	slot    string
	start   pglogrepl.LSN
	started bool
}

// newReplEnv creates database db, runs setup there, publishes all tables
// and creates the slot. walsenderSettings are extra startup settings of the
// replication connection (e.g. logical_decoding_work_mem, which the
// walsender's decoding uses).
func newReplEnv(t *testing.T, pg *harness.Postgres, db string, walsenderSettings map[string]string, setup ...string) *replEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pg.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	setup = append(setup, "CREATE PUBLICATION "+decTestPub+" FOR ALL TABLES")
	if err := pg.Exec(ctx, db, setup...); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgconn.ParseConfig(pg.DSN(db) + "&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range SessionSettings {
		cfg.RuntimeParams[k] = v
	}
	for k, v := range walsenderSettings {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	slot := "dec_" + db
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		t.Fatal(err)
	}
	start, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		t.Fatal(err)
	}
	return &replEnv{t: t, pg: pg, db: db, conn: conn, slot: slot, start: start}
}

// exec runs statements on one ordinary connection of the test database.
func (e *replEnv) exec(sqls ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := e.pg.Exec(ctx, e.db, sqls...); err != nil {
		e.t.Fatal(err)
	}
}

// connect opens an ordinary connection with SessionSettings.
func (e *replEnv) connect(ctx context.Context) *pgx.Conn {
	e.t.Helper()
	cfg, err := pgx.ParseConfig(e.pg.DSN(e.db))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range SessionSettings {
		cfg.RuntimeParams[k] = v
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// collect streams from the slot (starting replication on first use) into
// dec until finals Final chunks arrived, and returns every chunk seen. It is
// bounded by the context's deadline.
func (e *replEnv) collect(ctx context.Context, dec *Decoder, finals int) []Chunk {
	e.t.Helper()
	got := 0
	return e.collectUntil(ctx, dec, func(c []Chunk) bool {
		for ; len(c) > 0 && got < finals; c = c[1:] {
			if c[0].Final {
				got++
			}
		}
		return got >= finals
	})
}

// collectUntil streams into dec until done, called after every message
// with the chunks emitted by it, returns true. It returns every chunk.
func (e *replEnv) collectUntil(ctx context.Context, dec *Decoder, done func(newChunks []Chunk) bool) []Chunk {
	e.t.Helper()
	if !e.started {
		err := pglogrepl.StartReplication(ctx, e.conn, e.slot, e.start, pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '2'", "publication_names '" + decTestPub + "'",
				"messages 'true'", "streaming 'on'"},
		})
		if err != nil {
			e.t.Fatal(err)
		}
		e.started = true
	}
	var out []Chunk
	emit := func(c Chunk) error {
		out = append(out, c)
		return nil
	}
	seen := 0
	for {
		fresh := out[seen:]
		seen = len(out)
		if done(fresh) {
			return out
		}
		raw, err := e.conn.ReceiveMessage(ctx)
		if err != nil {
			e.t.Fatalf("receive (after %d chunks): %v", len(out), err)
		}
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			e.t.Fatalf("replication error: %+v", m)
		case *pgproto3.CopyData:
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					e.t.Fatal(err)
				}
				if ka.ReplyRequested {
					// Only the start is confirmed: tests never release WAL.
					err = pglogrepl.SendStandbyStatusUpdate(ctx, e.conn, pglogrepl.StandbyStatusUpdate{
						WALWritePosition: e.start, WALFlushPosition: e.start, WALApplyPosition: e.start})
					if err != nil {
						e.t.Fatal(err)
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					e.t.Fatal(err)
				}
				if err := dec.Decode(ctx, xld.WALData, xld.WALStart, emit); err != nil {
					e.t.Fatalf("decode: %v", err)
				}
			}
		}
	}
}

// newTestDecoder returns a decoder for env's database with a catalog
// resolver on its own connection.
func newTestDecoder(t *testing.T, e *replEnv, opts DecoderOptions) *Decoder {
	t.Helper()
	ctx := context.Background()
	q := e.connect(ctx)
	opts.Database = e.db
	if opts.Resolver == nil {
		opts.Resolver = NewTypeResolver(q, nil)
	}
	d, err := NewDecoder(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// records flattens the chunks' records.
func records(chunks []Chunk) []pipeline.Record {
	var out []pipeline.Record
	for _, c := range chunks {
		out = append(out, c.Records...)
	}
	return out
}

// finalChunks returns the Final chunks.
func finalChunks(chunks []Chunk) []Chunk {
	var out []Chunk
	for _, c := range chunks {
		if c.Final {
			out = append(out, c)
		}
	}
	return out
}

// sameValue compares decoded values exactly: decimals by digits and scale,
// floats bit for bit (-0 differs from 0) except that every NaN is equal, the rest deeply.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case pipeline.Decimal:
		y, ok := b.(pipeline.Decimal)
		return ok && x.Special == y.Special && x.String() == y.String()
	case float64:
		y, ok := b.(float64)
		return ok && (math.Float64bits(x) == math.Float64bits(y) || math.IsNaN(x) && math.IsNaN(y))
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// dec is a test shorthand for a finite decimal.
func dec(s string) pipeline.Decimal {
	d, err := pipeline.ParseDecimal(s)
	if err != nil {
		panic(err)
	}
	return d
}

// decimalOfNumeric converts pgx's binary numeric into a Decimal.
func decimalOfNumeric(n pgtype.Numeric) (pipeline.Decimal, error) {
	switch {
	case n.NaN:
		return pipeline.Decimal{Special: pipeline.NaN}, nil
	case n.InfinityModifier == pgtype.Infinity:
		return pipeline.Decimal{Special: pipeline.PosInfinity}, nil
	case n.InfinityModifier == pgtype.NegativeInfinity:
		return pipeline.Decimal{Special: pipeline.NegInfinity}, nil
	case n.Int == nil:
		return pipeline.Decimal{}, errors.New("invalid numeric")
	}
	u := new(big.Int).Set(n.Int)
	if n.Exp >= 0 {
		u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n.Exp)), nil))
		return pipeline.Decimal{Unscaled: u}, nil
	}
	return pipeline.Decimal{Unscaled: u, Scale: -n.Exp}, nil
}

// binaryOracle converts what pgx decoded from the binary format into the
// record model where the conversion is unambiguous; ok is false when the
// value kind is not covered.
func binaryOracle(v any) (any, bool) {
	switch x := v.(type) {
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case float32:
		return float64(x), true
	case float64:
		return x, true
	case bool:
		return x, true
	case pgtype.Numeric:
		d, err := decimalOfNumeric(x)
		return d, err == nil
	case pgtype.Interval:
		return pipeline.Interval{Months: x.Months, Days: x.Days, Micros: x.Microseconds}, x.Valid
	case pgtype.Time:
		return pipeline.TimeOfDay(x.Microseconds), x.Valid
	case [16]byte:
		return pipeline.UUID(x), true
	}
	return nil, false
}

func fmtValue(v any) string {
	switch x := v.(type) {
	case pipeline.Decimal:
		return "Decimal(" + x.String() + ")"
	case []byte:
		return fmt.Sprintf("bytes(%x)", x)
	}
	return fmt.Sprintf("%#v", v)
}

// spillFiles lists the files left in dir.
func spillFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

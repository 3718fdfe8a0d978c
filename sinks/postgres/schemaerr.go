package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice/pipeline"
)

// schemaError is a failure to bring a target table to a batch's shape
// (create it, add a column, fill existing rows with a new column's
// missing value).
type schemaError struct {
	table pipeline.TableID
	err   error
}

func (e *schemaError) Error() string { return e.err.Error() }
func (e *schemaError) Unwrap() error { return e.err }

// tableError returns err as a *pipeline.TableError when it is a schema
// change this sink can never apply, so the runtime quarantines that table
// alone; nil otherwise. Permanent are the server's answers that blame the
// statement — SQLSTATE classes 22 (data exception: a default the column
// type cannot take), 23 (integrity), 42 (syntax or access rule: an unknown
// type, a missing privilege) and 0A (feature not supported) — and errors
// raised before anything reached the server (a missing value the driver
// cannot encode, while the connection is still up). A lost connection, a
// timeout or any other server error stays transient.
func tableError(ctx context.Context, err error, connUp bool) error {
	var se *schemaError
	if !errors.As(err, &se) || ctx.Err() != nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		for _, class := range []string{"22", "23", "42", "0A"} {
			if strings.HasPrefix(pe.Code, class) {
				return &pipeline.TableError{Table: se.table, Err: err}
			}
		}
		return nil
	}
	var ne net.Error
	if !connUp || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err) || strings.Contains(err.Error(), "conn closed") {
		return nil
	}
	return &pipeline.TableError{Table: se.table, Err: err}
}

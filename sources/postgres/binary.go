package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Chunk reads take built-in numbers, booleans, dates, timestamps, uuids
// and bytea in the binary result format: fixed-width integers instead of
// text to parse (timestamps' text was most of the reads' decoding time).
// Every value decodes to exactly what DecodeText gives for the same
// value's text (TestDecodeTextRoundTrip reads every case both ways); any
// other type, and every key column (the chunk cursor keeps the keys' text),
// stays text.

// pgEpochMicros and pgEpochDays are 2000-01-01, the binary forms' epoch,
// after the Unix epoch.
const (
	pgEpochMicros = 946684800 * 1_000_000
	pgEpochDays   = 10957
)

// binaryReadable reports whether a column is read in the binary format:
// a built-in scalar type of the list above, or a domain over one.
func binaryReadable(info *ColumnInfo) bool {
	d := info.Type.decodeTarget()
	if d.Elem != nil || d.Kind != 'b' || (d.Namespace != "" && d.Namespace != "pg_catalog") {
		return false
	}
	switch d.OID {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.Float4OID, pgtype.Float8OID,
		pgtype.BoolOID, pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID,
		pgtype.UUIDOID, pgtype.ByteaOID:
		return true
	}
	return false
}

// chunkFormats returns the result format of each column of shape for a
// chunk read: binary where binaryReadable, text for the rest and for the
// key columns.
func chunkFormats(shape *TableShape) []int16 {
	out := make([]int16, len(shape.Columns))
	for i := range shape.Columns {
		if binaryReadable(&shape.Columns[i]) {
			out[i] = pgx.BinaryFormatCode
		}
	}
	for _, k := range shape.Table.KeyIdx {
		out[k] = pgx.TextFormatCode
	}
	return out
}

// decodeChunkValue decodes one non-NULL value of a chunk read in format.
func decodeChunkValue(info ColumnInfo, format int16, raw []byte) (any, error) {
	if format != pgx.BinaryFormatCode {
		return DecodeText(info, raw)
	}
	v, err := decodeBinary(info.Type.decodeTarget().OID, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: column %q (%s): %w", ErrValue, info.Name, info.Type.Name, err)
	}
	return v, nil
}

var errBinaryLength = errors.New("binary value of unexpected length")

// decodeBinary decodes the binary form of a type binaryReadable accepts.
func decodeBinary(oid uint32, b []byte) (any, error) {
	fixed := func(n int) error {
		if len(b) != n {
			return fmt.Errorf("%w: %d bytes, want %d", errBinaryLength, len(b), n)
		}
		return nil
	}
	switch oid {
	case pgtype.Int2OID:
		if err := fixed(2); err != nil {
			return nil, err
		}
		return int64(int16(binary.BigEndian.Uint16(b))), nil
	case pgtype.Int4OID:
		if err := fixed(4); err != nil {
			return nil, err
		}
		return int64(int32(binary.BigEndian.Uint32(b))), nil
	case pgtype.Int8OID:
		if err := fixed(8); err != nil {
			return nil, err
		}
		return int64(binary.BigEndian.Uint64(b)), nil
	case pgtype.Float4OID:
		if err := fixed(4); err != nil {
			return nil, err
		}
		return canonicalNaN(float64(math.Float32frombits(binary.BigEndian.Uint32(b)))), nil
	case pgtype.Float8OID:
		if err := fixed(8); err != nil {
			return nil, err
		}
		return canonicalNaN(math.Float64frombits(binary.BigEndian.Uint64(b))), nil
	case pgtype.BoolOID:
		if err := fixed(1); err != nil {
			return nil, err
		}
		return b[0] != 0, nil
	case pgtype.DateOID:
		if err := fixed(4); err != nil {
			return nil, err
		}
		switch d := int32(binary.BigEndian.Uint32(b)); d {
		case math.MaxInt32:
			return pipeline.Date{Special: pipeline.PosInfinity}, nil
		case math.MinInt32:
			return pipeline.Date{Special: pipeline.NegInfinity}, nil
		default:
			days := int64(d) + pgEpochDays
			if days > math.MaxInt32 || days < math.MinInt32 {
				return nil, fmt.Errorf("date %d days after 2000-01-01 is outside the representable range", d)
			}
			return pipeline.Date{Days: int32(days)}, nil
		}
	case pgtype.TimestampOID, pgtype.TimestamptzOID:
		if err := fixed(8); err != nil {
			return nil, err
		}
		switch us := int64(binary.BigEndian.Uint64(b)); us {
		case math.MaxInt64:
			return pipeline.Timestamp{Special: pipeline.PosInfinity}, nil
		case math.MinInt64:
			return pipeline.Timestamp{Special: pipeline.NegInfinity}, nil
		default:
			if us > math.MaxInt64-pgEpochMicros {
				return nil, fmt.Errorf("timestamp %d µs after 2000-01-01 is outside the representable range", us)
			}
			return pipeline.Timestamp{Micros: us + pgEpochMicros}, nil
		}
	case pgtype.UUIDOID:
		if err := fixed(16); err != nil {
			return nil, err
		}
		return pipeline.UUID(b), nil
	case pgtype.ByteaOID:
		return append([]byte{}, b...), nil
	}
	return nil, fmt.Errorf("no binary decoding for type oid %d", oid)
}

// canonicalNaN gives every NaN the bits of math.NaN(), as parsing "NaN"
// does, whatever payload the server's NaN carried.
func canonicalNaN(f float64) float64 {
	if f != f {
		return math.NaN()
	}
	return f
}

package postgres

import (
	"encoding/binary"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// A dead-lettered row's binary dates and timestamps read as their text,
// those beyond what the record model holds included (the usual poison
// value); other binary values as bytea's text form.
func TestBinaryTextOfDeadLetteredValues(t *testing.T) {
	be64 := func(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
	be32 := func(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
	const day = 86_400_000_000
	cases := []struct {
		oid  uint32
		raw  []byte
		want string
	}{
		{pgtype.TimestampOID, be64(0), "2000-01-01 00:00:00"},
		{pgtype.TimestampOID, be64(-day - 1), "1999-12-30 23:59:59.999999"},
		{pgtype.TimestamptzOID, be64(366*day + 3_600_000_000 + 250_000), "2001-01-01 01:00:00.25+00"},
		// 294270-01-01: PostgreSQL stores it, the record model does not.
		{pgtype.TimestampOID, be64(9_223_150_406_400_000_000), "294270-01-01 00:00:00"},
		{pgtype.DateOID, be32(-1), "1999-12-31"},
		{pgtype.Int4OID, be32(7), `\x00000007`},
	}
	for _, c := range cases {
		if got := binaryText(c.oid, c.raw); got != c.want {
			t.Errorf("binaryText(%d, %x) = %q, want %q", c.oid, c.raw, got, c.want)
		}
	}
}

package postgres

import (
	"errors"
	"math"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestDecodeBinaryRefusesWhatTextWould: a value of the wrong width, and
// a timestamp past what the record model holds (as its text is refused),
// are errors, never a wrong value.
func TestDecodeBinaryRefusesWhatTextWould(t *testing.T) {
	for _, tc := range []struct {
		oid uint32
		raw []byte
	}{
		{pgtype.Int4OID, []byte{0, 0, 1}},
		{pgtype.Int8OID, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{pgtype.UUIDOID, make([]byte, 15)},
		{pgtype.BoolOID, nil},
		{pgtype.TimestamptzOID, []byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}},
	} {
		if v, err := decodeBinary(tc.oid, tc.raw); err == nil {
			t.Errorf("oid %d %x: got %v, want an error", tc.oid, tc.raw, v)
		}
	}
	if _, err := decodeBinary(pgtype.Int2OID, []byte{1}); !errors.Is(err, errBinaryLength) {
		t.Errorf("short int2: %v", err)
	}
	// A NaN with a payload reads as the NaN the text "NaN" gives.
	v, err := decodeBinary(pgtype.Float8OID, []byte{0x7f, 0xf8, 0, 0, 0, 0, 0, 1})
	if err != nil || math.Float64bits(v.(float64)) != math.Float64bits(math.NaN()) {
		t.Errorf("NaN with a payload: %v %v", v, err)
	}
}

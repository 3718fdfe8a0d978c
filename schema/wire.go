package schema

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Confluent wire format: magic byte 0, the schema id as a 4-byte big-endian
// integer, then the Avro binary payload.
const (
	magicByte   = 0
	frameHeader = 5
)

// ErrNotFramed is returned by Unframe for input that is not in the Confluent
// wire format.
var ErrNotFramed = errors.New("schema: not a Confluent-framed message")

// Frame prefixes avroBytes with the magic byte and schema id. The id must
// be in [0, MaxInt32] (registry ids are positive int32); other ids panic, as
// they can only come from a programming error.
func Frame(id int, avroBytes []byte) []byte {
	return append(AppendFrame(make([]byte, 0, frameHeader+len(avroBytes)), id), avroBytes...)
}

// AppendFrame appends the wire format's header for schema id (the magic
// byte and the id, big-endian) to b; the Avro payload follows it.
func AppendFrame(b []byte, id int) []byte {
	if id < 0 || id > math.MaxInt32 {
		panic(fmt.Sprintf("schema: schema id %d does not fit in 4 bytes", id))
	}
	return binary.BigEndian.AppendUint32(append(b, magicByte), uint32(id))
}

// Unframe splits a framed message into its schema id and Avro payload; the
// payload aliases b. The id is read as a signed 32-bit integer, as the
// registry's clients do.
func Unframe(b []byte) (id int, payload []byte, err error) {
	if len(b) < frameHeader {
		return 0, nil, fmt.Errorf("%w: %d bytes, want at least %d", ErrNotFramed, len(b), frameHeader)
	}
	if b[0] != magicByte {
		return 0, nil, fmt.Errorf("%w: magic byte %#x", ErrNotFramed, b[0])
	}
	return int(int32(binary.BigEndian.Uint32(b[1:5]))), b[frameHeader:], nil
}

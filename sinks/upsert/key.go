package upsert

import (
	"encoding/binary"
	"fmt"
	"math"
)

// appendKey appends an encoding of a row's key values to b: equal keys
// encode equally, different keys differently (each value carries its type
// and, when variable in size, its length). Values of types this function
// does not know are offered to conv.AppendKey before the fallback
// rendering.
func appendKey(b []byte, keys []int, vals []any, conv Converter) []byte {
	for _, j := range keys {
		switch x := vals[j].(type) {
		case int64:
			b = binary.BigEndian.AppendUint64(append(b, 1), uint64(x))
		case uint64:
			b = binary.BigEndian.AppendUint64(append(b, 2), x)
		case int32:
			b = binary.BigEndian.AppendUint32(append(b, 3), uint32(x))
		case string:
			b = append(binary.AppendUvarint(append(b, 4), uint64(len(x))), x...)
		case []byte:
			b = append(binary.AppendUvarint(append(b, 5), uint64(len(x))), x...)
		case bool:
			if x {
				b = append(b, 6, 1)
			} else {
				b = append(b, 6, 0)
			}
		case float64:
			if x != x {
				x = math.NaN()
			}
			b = binary.BigEndian.AppendUint64(append(b, 8), math.Float64bits(x))
		case float32:
			if x != x {
				x = float32(math.NaN())
			}
			b = binary.BigEndian.AppendUint32(append(b, 9), math.Float32bits(x))
		default:
			if nb, ok := conv.AppendKey(b, x); ok {
				b = nb
				continue
			}
			s := fmt.Sprintf("%T=%v", x, x)
			b = append(binary.AppendUvarint(append(b, 0xff), uint64(len(s))), s...)
		}
	}
	return b
}

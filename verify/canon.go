package verify

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// AppendCanon appends Canon(v) to b, without allocating for the
// commonest kinds of values (integers, booleans, text, decimals whose
// unscaled value fits an int64), so a caller can look a value's text up
// in a map keyed by it without making a string.
func AppendCanon(b []byte, v any) []byte {
	if out, ok := appendScalar(b, v); ok {
		return out
	}
	return append(b, Canon(v)...)
}

// appendScalar appends the canonical text of the commonest kinds of
// values (the snapshot engine keys every chunk row, a window every
// change) without fmt: the same text as Canon's default case. false: v is
// of another kind.
func appendScalar(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "NULL"...), true
	case string:
		return strconv.AppendQuote(append(b, "string:"...), x), true
	case int64:
		return strconv.AppendInt(append(b, "int64:"...), x, 10), true
	case int32:
		return strconv.AppendInt(append(b, "int32:"...), int64(x), 10), true
	case int16:
		return strconv.AppendInt(append(b, "int16:"...), int64(x), 10), true
	case uint64:
		return strconv.AppendUint(append(b, "uint64:"...), x, 10), true
	case uint32:
		return strconv.AppendUint(append(b, "uint32:"...), uint64(x), 10), true
	case bool:
		return strconv.AppendBool(append(b, "bool:"...), x), true
	case pipeline.Decimal:
		if x.IsFinite() && (x.Unscaled == nil || x.Unscaled.IsInt64()) {
			return appendSmallDecimal(append(b, "dec:"...), x), true
		}
	}
	return b, false
}

// Canon renders a record-model value in a canonical text form: equal values
// render equally whatever representation detail a sink returns (decimal
// trailing zeros, JSON whitespace and key order), and values a sink must
// keep apart stay apart (-0.0 and 0, ±Infinity and NaN, text and bytes).
func Canon(v any) string {
	var a [64]byte
	if out, ok := appendScalar(a[:0], v); ok {
		return string(out)
	}
	switch x := v.(type) {
	case pipeline.Unchanged:
		return "UNCHANGED"
	case pipeline.Decimal:
		return "dec:" + canonDecimal(x)
	case pipeline.JSON:
		return "json:" + canonJSON(string(x))
	case []byte:
		return "bytes:" + hex.EncodeToString(x)
	case pipeline.UUID:
		return "uuid:" + x.String()
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = Canon(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case time.Time:
		return "time.Time:" + x.String()
	default:
		return fmt.Sprintf("%T:%v", v, v)
	}
}

func canonDecimal(d pipeline.Decimal) string {
	if !d.IsFinite() {
		return d.Special.String()
	}
	if d.Unscaled == nil || d.Unscaled.IsInt64() {
		return canonSmallDecimal(d)
	}
	u := new(big.Int).Set(d.Unscaled)
	scale := d.Scale
	ten := big.NewInt(10)
	for scale > 0 {
		q, r := new(big.Int).QuoRem(u, ten, new(big.Int))
		if r.Sign() != 0 {
			break
		}
		u, scale = q, scale-1
	}
	return pipeline.Decimal{Unscaled: u, Scale: scale}.String()
}

// canonSmallDecimal is canonDecimal for an unscaled value that fits an
// int64, without big arithmetic: trailing zeros of the fraction dropped,
// then pipeline.Decimal's rendering.
func canonSmallDecimal(d pipeline.Decimal) string { return string(appendSmallDecimal(nil, d)) }

// appendSmallDecimal appends canonSmallDecimal(d) to out.
func appendSmallDecimal(out []byte, d pipeline.Decimal) []byte {
	var u int64
	if d.Unscaled != nil {
		u = d.Unscaled.Int64()
	}
	scale := d.Scale
	for scale > 0 && u%10 == 0 {
		u, scale = u/10, scale-1
	}
	if u == 0 {
		return append(out, '0')
	}
	var b [48]byte
	digits := strconv.AppendUint(b[:0], absUint(u), 10)
	if scale < 0 {
		for range -scale {
			digits = append(digits, '0')
		}
	}
	if u < 0 {
		out = append(out, '-')
	}
	if scale > 0 {
		for len(digits) <= int(scale) {
			digits = append([]byte{'0'}, digits...)
		}
		out = append(out, digits[:len(digits)-int(scale)]...)
		out = append(out, '.')
		return append(out, digits[len(digits)-int(scale):]...)
	}
	return append(out, digits...)
}

func absUint(u int64) uint64 {
	if u < 0 {
		return uint64(-(u + 1)) + 1 // -MinInt64 fits a uint64
	}
	return uint64(u)
}

func canonJSON(s string) string {
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "invalid:" + s
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "invalid:" + s
	}
	return strings.TrimSpace(b.String())
}

// Equal reports whether two record-model values are the same value.
func Equal(a, b any) bool { return Canon(a) == Canon(b) }

// Key is the canonical string of a key's values; rows read from a source
// and a sink are matched by it.
func Key(values []any) string {
	if len(values) == 1 {
		return Canon(values[0])
	}
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = Canon(v)
	}
	return strings.Join(parts, "|")
}

// RowKey is Key of the key columns of row, a row aligned with
// table.Columns.
func RowKey(table *pipeline.Table, row []any) string {
	if len(table.KeyIdx) == 1 {
		return Canon(row[table.KeyIdx[0]])
	}
	k := make([]any, len(table.KeyIdx))
	for i, idx := range table.KeyIdx {
		k[i] = row[idx]
	}
	return Key(k)
}

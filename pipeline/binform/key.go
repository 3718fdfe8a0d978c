package binform

import (
	"math"
	"math/big"

	"github.com/sluice-cdc/sluice/pipeline"
)

// AppendKey appends v in its key form: values SQL finds equal encode
// equally whatever the columns' numeric types (the two sides of a join,
// a group of an aggregate): an unsigned value that fits int64 is encoded as a signed one (a
// signed foreign key may refer to an unsigned primary key), and a decimal
// is reduced to its shortest scale, an integral one to the integer (5.00
// = 5.0 = 5, numeric = bigint). Text is compared byte for byte: a
// case- or pad-insensitive MySQL collation that finds 'a' = 'A ' is not
// followed.
func AppendKey(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case uint64:
		if x <= math.MaxInt64 {
			v = int64(x)
		}
	case pipeline.Decimal:
		v = canonicalDecimal(x)
	}
	return Append(b, v)
}

var bigTen = big.NewInt(10)

// canonicalDecimal returns d with trailing fractional zeros removed, as an
// int64 or uint64 when it is an integer that fits one.
func canonicalDecimal(d pipeline.Decimal) any {
	if d.Special != 0 || d.Unscaled == nil {
		return d
	}
	u, scale := new(big.Int).Set(d.Unscaled), d.Scale
	q, m := new(big.Int), new(big.Int)
	for scale > 0 && u.Sign() != 0 {
		q.QuoRem(u, bigTen, m)
		if m.Sign() != 0 {
			break
		}
		u, q = q, u
		scale--
	}
	if u.Sign() == 0 {
		scale = 0
	}
	for ; scale < 0; scale++ {
		u.Mul(u, bigTen)
	}
	if scale == 0 {
		if u.IsInt64() {
			return u.Int64()
		}
		if u.IsUint64() {
			return u.Uint64()
		}
	}
	return pipeline.Decimal{Unscaled: u, Scale: scale}
}

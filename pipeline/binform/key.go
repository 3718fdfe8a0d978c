package binform

import (
	"fmt"
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

// RowKey is the key form of img's primary-key columns (t.KeyIdx), which
// the stateful transforms key a source row's state by: a row SQL finds
// equal by key has one. A NULL or absent key value, or a table without
// a primary key, is an error.
func RowKey(t *pipeline.Table, img []any) ([]byte, error) {
	if img == nil {
		return nil, fmt.Errorf("%s: record without the image that holds its key", t.ID)
	}
	if len(t.KeyIdx) == 0 {
		return nil, fmt.Errorf("%s has no primary key (or replica identity)", t.ID)
	}
	var b []byte
	for _, k := range t.KeyIdx {
		v := img[k]
		if v == nil || v == pipeline.UnchangedValue {
			return nil, fmt.Errorf("key column %s is NULL or absent", t.Columns[k].Name)
		}
		var err error
		if b, err = AppendKey(b, v); err != nil {
			return nil, err
		}
	}
	return b, nil
}

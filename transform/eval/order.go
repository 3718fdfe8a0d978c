package eval

import (
	"cmp"
	"math"
	"math/big"
	"strconv"

	"github.com/cockroachdb/apd/v3"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// The order of record values, shared by the operators that sort or pick
// extremes (a window's min and max, a nested array's order).

// SmallDecimal returns v's unscaled int64 and scale when v is an integer or a
// finite decimal whose unscaled part fits.
func SmallDecimal(v any) (int64, int32, bool) {
	switch x := v.(type) {
	case int64:
		return x, 0, true
	case pipeline.Decimal:
		if x.Special == pipeline.Finite && x.Unscaled != nil && x.Unscaled.IsInt64() {
			return x.Unscaled.Int64(), x.Scale, true
		}
	}
	return 0, 0, false
}

// NumberToAPD converts a numeric record value exactly; false for NULL and
// non-numbers.
func NumberToAPD(v any) (*apd.Decimal, bool) {
	switch x := v.(type) {
	case int64:
		return apd.New(x, 0), true
	case uint64:
		d := new(apd.Decimal)
		d.Coeff.SetMathBigInt(new(big.Int).SetUint64(x))
		return d, true
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, false
		}
		d, _, err := apd.NewFromString(strconv.FormatFloat(x, 'g', -1, 64))
		return d, err == nil
	case pipeline.Decimal:
		if !x.IsFinite() {
			return nil, false
		}
		d, err := ToAPD(x)
		return d, err == nil
	}
	return nil, false
}

// Compare orders two non-NULL values of one column: numbers numerically,
// times and dates by instant, strings and bytes by bytes, false before
// true.
func Compare(a, b any) int {
	if ua, sa, ok := SmallDecimal(a); ok {
		if ub, sb, ok := SmallDecimal(b); ok && sa == sb {
			return cmp.Compare(ua, ub) // the same scale: no decimal arithmetic
		}
	}
	if da, ok := NumberToAPD(a); ok {
		if db, ok := NumberToAPD(b); ok {
			return da.Cmp(db)
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return cmp.Compare(x, y)
		}
	case pipeline.Timestamp:
		if y, ok := b.(pipeline.Timestamp); ok {
			return cmp.Compare(x.Micros, y.Micros)
		}
	case pipeline.Date:
		if y, ok := b.(pipeline.Date); ok {
			return cmp.Compare(x.Days, y.Days)
		}
	case bool:
		if y, ok := b.(bool); ok {
			switch {
			case x == y:
				return 0
			case !x:
				return -1
			}
			return 1
		}
	}
	return cmp.Compare(verify.Canon(a), verify.Canon(b))
}

package eval

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"

	"github.com/cockroachdb/apd/v3"
	"github.com/expr-lang/expr"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Decimal arithmetic: +, -, * are exact; / rounds half away from zero to
// divPrecision significant digits. A decimal meets an integer exactly and
// a float as a float. The comparisons compare numerically (1.50 == 1.5).
// Functions: decimal(x) makes one from a string, an integer or a float
// (the float's shortest text); decimal_round(d, places) rounds half away
// from zero (as SQL's round); decimal_float(d) is the nearest float.

const divPrecision = 34

var (
	exact = apd.BaseContext.WithPrecision(0)
	div   = func() *apd.Context {
		c := apd.BaseContext.WithPrecision(divPrecision)
		c.Rounding = apd.RoundHalfUp
		return c
	}()
)

// operand converts an operand of a decimal operator.
func operand(v any) (*apd.Decimal, error) {
	switch x := v.(type) {
	case pipeline.Decimal:
		return ToAPD(x)
	case int:
		return apd.New(int64(x), 0), nil
	case int64:
		return apd.New(x, 0), nil
	case uint64:
		d := new(apd.Decimal)
		d.Coeff.SetMathBigInt(new(big.Int).SetUint64(x))
		return d, nil
	case nil:
		return nil, errors.New("a decimal operand is NULL")
	}
	return nil, fmt.Errorf("%T is not a decimal operand", v)
}

// operands converts both operands of a decimal operator.
func operands(p []any) (a, b *apd.Decimal, err error) {
	if a, err = operand(p[0]); err == nil {
		b, err = operand(p[1])
	}
	return a, b, err
}

// ToAPD converts a decimal to apd's form, exactly (NaN and the infinities
// to apd's).
func ToAPD(x pipeline.Decimal) (*apd.Decimal, error) {
	d := new(apd.Decimal)
	switch x.Special {
	case pipeline.NaN:
		d.Form = apd.NaN
		return d, nil
	case pipeline.PosInfinity:
		d.Form = apd.Infinite
		return d, nil
	case pipeline.NegInfinity:
		d.Form, d.Negative = apd.Infinite, true
		return d, nil
	}
	if x.Unscaled != nil {
		d.Coeff.SetMathBigInt(new(big.Int).Abs(x.Unscaled))
		d.Negative = x.Unscaled.Sign() < 0
	}
	d.Exponent = -x.Scale
	return d, nil
}

// FromAPD converts apd's form back, exactly.
func FromAPD(d *apd.Decimal) pipeline.Decimal {
	switch d.Form {
	case apd.NaN, apd.NaNSignaling:
		return pipeline.Decimal{Special: pipeline.NaN}
	case apd.Infinite:
		if d.Negative {
			return pipeline.Decimal{Special: pipeline.NegInfinity}
		}
		return pipeline.Decimal{Special: pipeline.PosInfinity}
	}
	u := d.Coeff.MathBigInt()
	if d.Negative {
		u.Neg(u)
	}
	return pipeline.Decimal{Unscaled: u, Scale: -d.Exponent}
}

// floatOf converts a decimal operand met by a float.
func floatOf(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case pipeline.Decimal:
		f, err := decimalFloat(x)
		return f, err == nil
	}
	return 0, false
}

func decimalFloat(x pipeline.Decimal) (float64, error) {
	switch x.Special {
	case pipeline.NaN:
		return math.NaN(), nil
	case pipeline.PosInfinity:
		return math.Inf(1), nil
	case pipeline.NegInfinity:
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(x.String(), 64)
}

type arith func(c *apd.Context, d, x, y *apd.Decimal) (apd.Condition, error)

func arithmetic(name string, op arith, ctx *apd.Context, fop func(a, b float64) float64) func(...any) (any, error) {
	return func(p ...any) (any, error) {
		if _, isF := p[0].(float64); isF {
			return floatArith(p, fop)
		}
		if _, isF := p[1].(float64); isF {
			return floatArith(p, fop)
		}
		a, b, err := operands(p)
		if err != nil {
			return nil, err
		}
		var r apd.Decimal
		cond, err := op(ctx, &r, a, b)
		if err != nil {
			return nil, fmt.Errorf("decimal %s: %w", name, err)
		}
		if cond.DivisionByZero() || cond.DivisionUndefined() {
			return nil, errors.New("decimal division by zero")
		}
		if ctx == div && r.Form == apd.Finite {
			// A quotient has no scale of its own: drop the zeros the
			// precision padded it with (10/4 is 2.5), but stay an
			// integer's scale at least (100/1 is 100, not 1E+2).
			r.Reduce(&r)
			if r.Exponent > 0 {
				if _, err := apd.BaseContext.WithPrecision(1000).Quantize(&r, &r, 0); err != nil {
					return nil, err
				}
			}
		}
		return FromAPD(&r), nil
	}
}

func floatArith(p []any, fop func(a, b float64) float64) (any, error) {
	a, ok1 := floatOf(p[0])
	b, ok2 := floatOf(p[1])
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("cannot take %v and %v as floats", p[0], p[1])
	}
	return fop(a, b), nil
}

// compare makes a comparison; null is its result when an operand is NULL
// (nil: an error, for the orderings).
func compare(test func(int) bool, null *bool) func(...any) (any, error) {
	return func(p ...any) (any, error) {
		if null != nil && (p[0] == nil || p[1] == nil) {
			return *null, nil
		}
		_, f0 := p[0].(float64)
		_, f1 := p[1].(float64)
		if f0 || f1 {
			a, ok1 := floatOf(p[0])
			b, ok2 := floatOf(p[1])
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("cannot compare %v and %v", p[0], p[1])
			}
			switch {
			case a < b:
				return test(-1), nil
			case a > b:
				return test(1), nil
			}
			return test(0), nil
		}
		a, b, err := operands(p)
		if err != nil {
			return nil, err
		}
		if a.Form == apd.NaN || b.Form == apd.NaN {
			// As Postgres: NaN equals NaN and sorts above every number.
			an, bn := a.Form == apd.NaN, b.Form == apd.NaN
			switch {
			case an && bn:
				return test(0), nil
			case an:
				return test(1), nil
			}
			return test(-1), nil
		}
		return test(a.Cmp(b)), nil
	}
}

// signatures lists the operand pairs a decimal operator takes, each with
// its result type.
func signatures(result, floatResult reflect.Type) []any {
	others := []reflect.Type{typeInt, reflect.TypeFor[int](), typeUint}
	var out []any
	add := func(a, b, r reflect.Type) {
		out = append(out, reflect.New(reflect.FuncOf([]reflect.Type{a, b}, []reflect.Type{r}, false)).Interface())
	}
	add(typeDecimal, typeDecimal, result)
	for _, o := range others {
		add(typeDecimal, o, result)
		add(o, typeDecimal, result)
	}
	add(typeDecimal, typeFloat, floatResult)
	add(typeFloat, typeDecimal, floatResult)
	return out
}

func decimalOptions() []expr.Option {
	var opts []expr.Option
	for _, a := range []struct {
		op, fn string
		f      arith
		ctx    *apd.Context
		float  func(a, b float64) float64
	}{
		{"+", "__dec_add", (*apd.Context).Add, exact, func(a, b float64) float64 { return a + b }},
		{"-", "__dec_sub", (*apd.Context).Sub, exact, func(a, b float64) float64 { return a - b }},
		{"*", "__dec_mul", (*apd.Context).Mul, exact, func(a, b float64) float64 { return a * b }},
		{"/", "__dec_div", (*apd.Context).Quo, div, func(a, b float64) float64 { return a / b }},
	} {
		opts = append(opts, expr.Function(a.fn, arithmetic(a.op, a.f, a.ctx, a.float), signatures(typeDecimal, typeFloat)...),
			expr.Operator(a.op, a.fn))
	}
	no, yes := false, true
	for _, c := range []struct {
		op, fn string
		test   func(int) bool
		null   *bool
	}{
		{"==", "__dec_eq", func(c int) bool { return c == 0 }, &no},
		{"!=", "__dec_ne", func(c int) bool { return c != 0 }, &yes},
		{"<", "__dec_lt", func(c int) bool { return c < 0 }, nil},
		{"<=", "__dec_le", func(c int) bool { return c <= 0 }, nil},
		{">", "__dec_gt", func(c int) bool { return c > 0 }, nil},
		{">=", "__dec_ge", func(c int) bool { return c >= 0 }, nil},
	} {
		opts = append(opts, expr.Function(c.fn, compare(c.test, c.null), signatures(typeBool, typeBool)...), expr.Operator(c.op, c.fn))
	}
	opts = append(opts,
		expr.Function("decimal", makeDecimal, new(func(string) pipeline.Decimal), new(func(int) pipeline.Decimal),
			new(func(int64) pipeline.Decimal), new(func(uint64) pipeline.Decimal), new(func(float64) pipeline.Decimal),
			new(func(pipeline.Decimal) pipeline.Decimal)),
		expr.Function("decimal_round", roundDecimal, new(func(pipeline.Decimal, int) pipeline.Decimal)),
		expr.Function("decimal_float", func(p ...any) (any, error) {
			d, ok := p[0].(pipeline.Decimal)
			if !ok {
				return nil, fmt.Errorf("decimal_float: %v is not a decimal", p[0])
			}
			return decimalFloat(d)
		}, new(func(pipeline.Decimal) float64)),
	)
	return opts
}

func makeDecimal(p ...any) (any, error) {
	switch x := p[0].(type) {
	case string:
		return pipeline.ParseDecimal(x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return pipeline.ParseDecimal(strconv.FormatFloat(x, 'g', -1, 64))
		}
		return pipeline.ParseDecimal(strconv.FormatFloat(x, 'f', -1, 64))
	case pipeline.Decimal:
		return x, nil
	case nil:
		return nil, errors.New("decimal: the value is NULL")
	}
	d, err := operand(p[0])
	if err != nil {
		return nil, err
	}
	return FromAPD(d), nil
}

func roundDecimal(p ...any) (any, error) {
	x, ok := p[0].(pipeline.Decimal)
	if !ok {
		return nil, fmt.Errorf("decimal_round: %v is not a decimal", p[0])
	}
	places, _ := p[1].(int)
	d, err := ToAPD(x)
	if err != nil || d.Form != apd.Finite {
		return x, err
	}
	var r apd.Decimal
	c := apd.BaseContext.WithPrecision(1000)
	c.Rounding = apd.RoundHalfUp
	if _, err := c.Quantize(&r, d, int32(-places)); err != nil {
		return nil, fmt.Errorf("decimal_round: %w", err)
	}
	return FromAPD(&r), nil
}

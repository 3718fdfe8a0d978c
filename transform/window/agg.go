package window

import (
	"fmt"
	"math"
	"math/big"

	"github.com/cockroachdb/apd/v3"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/verify"
)

// Func is an aggregate function. Every one retracts exactly: a value
// removed is taken out as if it had never been added.
type Func uint8

const (
	CountRows     Func = iota // count(): rows
	Count                     // count(col): non-NULL values
	Sum                       // NULL when no value
	Avg                       // kept as sum and count; NULL when no value
	Min                       // the multiset of values, so the next extreme is known when the current one is retracted
	Max                       //
	CountDistinct             // distinct non-NULL values (their multiset)
	First                     // the value of the earliest event time (ties: the lowest version)
	Last                      // the value of the latest event time (ties: the highest version)
)

var funcNames = [...]string{"count", "count", "sum", "avg", "min", "max", "count_distinct", "first", "last"}

func (f Func) String() string { return funcNames[f] }

// ParseFunc reads a function's config name; count without a column is
// count().
func ParseFunc(name, column string) (Func, error) {
	if name == "count" && column == "" {
		return CountRows, nil
	}
	for f, n := range funcNames {
		if n == name && Func(f) != CountRows {
			return Func(f), nil
		}
	}
	return 0, fmt.Errorf("unknown aggregate function %s", name)
}

// Numeric says how a sum or average gives its numbers, by the kind of
// values it sums (all of a column's values are of one kind).
type Numeric uint8

const (
	Integer Numeric = iota // int64 or uint64 values: an exact decimal of scale 0
	Float                  // float64 values: summed exactly (each float is an exact decimal), given as the nearest float
	Exact                  // decimals: exact
)

// numericOf is the kind of a numeric value.
func numericOf(v any) Numeric {
	switch v.(type) {
	case float64:
		return Float
	case pipeline.Decimal:
		return Exact
	}
	return Integer
}

// acc is one aggregate's state in one window and group.
type acc interface {
	// add counts v (nil: NULL) of an event at time t with version ver.
	add(v any, t int64, ver pipeline.Version)
	// remove takes out what add(v, t, ver) counted.
	remove(v any, t int64, ver pipeline.Version)
	// result is the aggregate's value in the record model (nil: NULL).
	result() any
}

func newAcc(f Func) acc {
	switch f {
	case CountRows:
		return &count{rows: true}
	case Count:
		return &count{}
	case Sum:
		return &sum{}
	case Avg:
		return &sum{avg: true}
	case Min:
		return &extreme{max: false}
	case Max:
		return &extreme{max: true}
	case CountDistinct:
		return &distinct{vals: map[string]int64{}}
	case First:
		return &ordered{last: false, vals: map[stamp]any{}}
	case Last:
		return &ordered{last: true, vals: map[stamp]any{}}
	}
	panic(fmt.Sprintf("window: aggregate %d", f))
}

type count struct {
	rows bool
	n    int64
}

func (c *count) add(v any, _ int64, _ pipeline.Version) {
	if c.rows || v != nil {
		c.n++
	}
}

func (c *count) remove(v any, _ int64, _ pipeline.Version) {
	if c.rows || v != nil {
		c.n--
	}
}

func (c *count) result() any { return c.n }

// sum keeps an exact sum and the count of values summed: in an int64 at
// one scale while every value fits (the common case: a column's values
// share its scale), the rest in total.
type sum struct {
	num   Numeric
	avg   bool
	total apd.Decimal
	n     int64
	small int64
	scale int32 // small's; set by the first small value
	any   bool  // small holds a value's scale
}

// addSmall adds sign*v to small when it fits; false: not added.
func (s *sum) addSmall(v any, sign int64) bool {
	u, sc, ok := eval.SmallDecimal(v)
	if !ok || s.any && sc != s.scale {
		return false
	}
	if u == math.MinInt64 {
		return false
	}
	d := sign * u
	r := s.small + d
	if d > 0 && r < s.small || d < 0 && r > s.small {
		return false // past int64: total takes it
	}
	s.small, s.scale, s.any = r, sc, true
	return true
}

var (
	exact = apd.BaseContext.WithPrecision(0) // add and subtract: exact
	wide  = apd.BaseContext.WithPrecision(1000)
)

func (s *sum) add(v any, _ int64, _ pipeline.Version) {
	if v == nil {
		return
	}
	if s.addSmall(v, 1) {
		if s.n == 0 {
			s.num = numericOf(v)
		}
		s.n++
		return
	}
	if d, ok := eval.NumberToAPD(v); ok {
		if s.n == 0 {
			s.num = numericOf(v)
		}
		_, _ = exact.Add(&s.total, &s.total, d)
		s.n++
	}
}

func (s *sum) remove(v any, _ int64, _ pipeline.Version) {
	if v == nil {
		return
	}
	if s.addSmall(v, -1) {
		s.n--
		return
	}
	if d, ok := eval.NumberToAPD(v); ok {
		_, _ = exact.Sub(&s.total, &s.total, d)
		s.n--
	}
}

func (s *sum) result() any {
	if s.n == 0 {
		return nil
	}
	v := &s.total
	if s.any {
		v = new(apd.Decimal)
		_, _ = exact.Add(v, &s.total, apd.New(s.small, -s.scale))
	}
	if s.avg {
		q := new(apd.Decimal)
		ctx := apd.BaseContext.WithPrecision(34)
		ctx.Rounding = apd.RoundHalfUp
		_, _ = ctx.Quo(q, v, apd.New(s.n, 0))
		// A quotient has no scale of its own: drop the zeros the
		// precision padded it with, but keep at least the sum's scale.
		q.Reduce(q)
		if q.Exponent > v.Exponent {
			_, _ = wide.Quantize(q, q, min(v.Exponent, 0))
		}
		if s.num != Float {
			return eval.FromAPD(q)
		}
		v = q
	}
	switch s.num {
	case Integer:
		var i apd.Decimal
		_, _ = wide.Quantize(&i, v, 0)
		return eval.FromAPD(&i)
	case Float:
		f, _ := v.Float64()
		return f
	}
	return eval.FromAPD(v)
}

// entry is one distinct value of a multiset and how many times it is in.
type entry struct {
	v any
	n int64
}

// extreme keeps the multiset of values so that retracting the current
// minimum (maximum) finds the next one. Values that are int64s, or
// decimals of one scale whose unscaled value fits an int64 (a column's
// values, as a rule), are counted by that integer (ints), without a text
// or an entry each; any other value by its canonical text (vals).
type extreme struct {
	max  bool
	vals map[string]*entry
	best *entry // nil: recompute
	ints map[int64]int64
	// kind is what ints holds, set by the first such value: int64s, or
	// decimals of scale.
	kind    intKind
	scale   int32
	ibest   int64
	ibestOK bool // ibest is the best of ints (false: recompute)
}

type intKind uint8

const (
	intsNone intKind = iota
	intsInt64
	intsDecimal
)

// intOf returns v's integer in ints, when v belongs there; claim lets the
// first such value set the kind.
func (e *extreme) intOf(v any, claim bool) (int64, bool) {
	switch x := v.(type) {
	case int64:
		if e.kind == intsNone && claim {
			e.kind = intsInt64
		}
		return x, e.kind == intsInt64
	case pipeline.Decimal:
		if x.Special != pipeline.Finite || x.Unscaled == nil || !x.Unscaled.IsInt64() {
			return 0, false
		}
		if e.kind == intsNone && claim {
			e.kind, e.scale = intsDecimal, x.Scale
		}
		return x.Unscaled.Int64(), e.kind == intsDecimal && x.Scale == e.scale
	}
	return 0, false
}

// rescale returns unscaled value u of scale from as an unscaled value of
// scale to, when that is exact and fits an int64.
func rescale(u int64, from, to int32) (int64, bool) {
	if u == 0 {
		return 0, true
	}
	for ; from < to; from++ {
		if u > math.MaxInt64/10 || u < math.MinInt64/10 {
			return 0, false
		}
		u *= 10
	}
	for ; from > to; from-- {
		if u%10 != 0 {
			return 0, false
		}
		u /= 10
	}
	return u, true
}

// intValue is integer u of ints as a value of the record model.
func (e *extreme) intValue(u int64) any {
	if e.kind == intsDecimal {
		return pipeline.Decimal{Unscaled: big.NewInt(u), Scale: e.scale}
	}
	return u
}

func (e *extreme) add(v any, _ int64, _ pipeline.Version) {
	if v != nil {
		e.addN(v, 1)
	}
}

// addN counts v n times.
func (e *extreme) addN(v any, n int64) {
	if u, ok := e.intOf(v, true); ok {
		if e.ints == nil {
			e.ints = map[int64]int64{}
		}
		e.ints[u] += n
		if len(e.ints) == 1 {
			e.ibest, e.ibestOK = u, true
		} else if e.ibestOK && (e.max && u > e.ibest || !e.max && u < e.ibest) {
			e.ibest = u
		}
		return
	}
	if e.vals == nil {
		e.vals = map[string]*entry{}
	}
	var kb [64]byte
	k := verify.AppendCanon(kb[:0], v)
	en := e.vals[string(k)]
	if en == nil {
		en = &entry{v: v}
		e.vals[string(k)] = en
	}
	en.n += n
	if e.best != nil && e.better(v, e.best.v) {
		e.best = en
	}
	if len(e.vals) == 1 {
		e.best = en
	}
}

// remove takes out one value equal to v: where v is counted, else an
// equal value of another scale (a value is counted as the first equal
// one was, and a state loaded may count them apart).
func (e *extreme) remove(v any, _ int64, _ pipeline.Version) {
	if v == nil {
		return
	}
	if u, ok := e.intOf(v, false); ok && e.takeInt(u) {
		return
	}
	if e.takeVal(v) {
		return
	}
	if x, ok := v.(pipeline.Decimal); ok && e.kind == intsDecimal && x.Special == pipeline.Finite && x.Unscaled != nil && x.Unscaled.IsInt64() {
		if u, ok := rescale(x.Unscaled.Int64(), x.Scale, e.scale); ok {
			e.takeInt(u)
		}
	}
}

// takeInt takes one u out of ints; false when it has none.
func (e *extreme) takeInt(u int64) bool {
	switch n := e.ints[u]; {
	case n == 0:
		return false
	case n == 1:
		delete(e.ints, u)
		if e.ibest == u {
			e.ibestOK = false
		}
	default:
		e.ints[u] = n - 1
	}
	return true
}

// takeVal takes one value equal to v out of vals; false when it has none.
func (e *extreme) takeVal(v any) bool {
	var kb [64]byte
	k := verify.AppendCanon(kb[:0], v)
	en := e.vals[string(k)]
	if en == nil {
		return false
	}
	if en.n--; en.n == 0 {
		delete(e.vals, string(k))
		if e.best == en {
			e.best = nil
		}
	}
	return true
}

func (e *extreme) better(a, b any) bool {
	c := eval.Compare(a, b)
	if e.max {
		return c > 0
	}
	return c < 0
}

func (e *extreme) result() any {
	if e.best == nil {
		for _, en := range e.vals {
			if e.best == nil || e.better(en.v, e.best.v) {
				e.best = en
			}
		}
	}
	var best any
	if e.best != nil {
		best = e.best.v
	}
	if len(e.ints) > 0 {
		if !e.ibestOK {
			first := true
			for u := range e.ints {
				if first || e.max && u > e.ibest || !e.max && u < e.ibest {
					e.ibest, first = u, false
				}
			}
			e.ibestOK = true
		}
		if iv := e.intValue(e.ibest); best == nil || e.better(iv, best) {
			best = iv
		}
	}
	return best
}

// distinct keeps the multiset of non-NULL values.
type distinct struct{ vals map[string]int64 }

func (d *distinct) add(v any, _ int64, _ pipeline.Version) {
	if v != nil {
		d.vals[verify.Canon(v)]++
	}
}

func (d *distinct) remove(v any, _ int64, _ pipeline.Version) {
	if v == nil {
		return
	}
	k := verify.Canon(v)
	if d.vals[k]--; d.vals[k] <= 0 {
		delete(d.vals, k)
	}
}

func (d *distinct) result() any { return int64(len(d.vals)) }

// stamp orders events: event time, then version.
type stamp struct {
	t   int64
	ver pipeline.Version
}

func (a stamp) less(b stamp) bool { return a.t < b.t || a.t == b.t && a.ver.Less(b.ver) }

// ordered keeps every contribution by its stamp, for first and last.
type ordered struct {
	last bool
	vals map[stamp]any
}

func (o *ordered) add(v any, t int64, ver pipeline.Version) { o.vals[stamp{t, ver}] = v }

func (o *ordered) remove(v any, t int64, ver pipeline.Version) {
	if _, ok := o.vals[stamp{t, ver}]; ok {
		delete(o.vals, stamp{t, ver})
		return
	}
	// A before image (late: correct) does not say which change added the
	// value: any one of its event time and value is the same to the
	// result.
	k := verify.Canon(v)
	for s, x := range o.vals {
		if s.t == t && verify.Canon(x) == k {
			delete(o.vals, s)
			return
		}
	}
}

func (o *ordered) result() any {
	var best stamp
	var v any
	found := false
	for s, x := range o.vals {
		if !found || (o.last && best.less(s)) || (!o.last && s.less(best)) {
			best, v, found = s, x, true
		}
	}
	return v
}

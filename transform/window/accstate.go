package window

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/verify"
)

// The aggregates of a retained window's groups (late: correct) are stored
// as they are, since the rows they were built from are gone: each
// accumulator as what it keeps, in a fixed order so equal states encode
// alike.

// appendAcc appends a's state to b.
func appendAcc(b []byte, a acc) ([]byte, error) {
	switch x := a.(type) {
	case *count:
		return binary.AppendVarint(b, x.n), nil
	case *sum:
		b = append(b, byte(x.num), boolByte(x.any))
		b = binary.AppendVarint(binary.AppendVarint(b, x.n), x.small)
		b = binary.AppendVarint(b, int64(x.scale))
		return binform.AppendString(b, x.total.String()), nil
	case *extreme:
		// Every value with its count, in the order of their canonical
		// text (an integer of ints before an equal value of vals).
		type item struct {
			k     string
			v     any
			n     int64
			inVal bool
		}
		items := make([]item, 0, len(x.vals)+len(x.ints))
		for k, en := range x.vals {
			items = append(items, item{k, en.v, en.n, true})
		}
		for u, n := range x.ints {
			v := x.intValue(u)
			items = append(items, item{verify.Canon(v), v, n, false})
		}
		slices.SortFunc(items, func(a, b item) int {
			if c := strings.Compare(a.k, b.k); c != 0 {
				return c
			}
			return cmp.Compare(boolByte(a.inVal), boolByte(b.inVal))
		})
		b = binary.AppendUvarint(b, uint64(len(items)))
		for _, it := range items {
			var err error
			if b, err = binform.Append(b, it.v); err != nil {
				return nil, err
			}
			b = binary.AppendVarint(b, it.n)
		}
		return b, nil
	case *distinct:
		keys := slices.Sorted(maps.Keys(x.vals))
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = binary.AppendVarint(binform.AppendString(b, k), x.vals[k])
		}
		return b, nil
	case *ordered:
		stamps := make([]stamp, 0, len(x.vals))
		for s := range x.vals {
			stamps = append(stamps, s)
		}
		slices.SortFunc(stamps, func(a, b stamp) int {
			if a.less(b) {
				return -1
			}
			if b.less(a) {
				return 1
			}
			return 0
		})
		b = binary.AppendUvarint(b, uint64(len(stamps)))
		for _, s := range stamps {
			b = binform.AppendVersion(binary.AppendVarint(b, s.t), s.ver)
			var err error
			if b, err = binform.Append(b, x.vals[s]); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("window: aggregate state %T", a)
}

// readAcc reads into a (fresh, from newAcc) what appendAcc wrote.
func readAcc(r *binform.Reader, a acc) error {
	switch x := a.(type) {
	case *count:
		x.n = r.Varint()
	case *sum:
		x.num, x.any = Numeric(r.Byte()), r.Byte() == 1
		x.n, x.small, x.scale = r.Varint(), r.Varint(), int32(r.Varint())
		if _, _, err := x.total.SetString(string(r.Bytes())); err != nil && r.Err() == nil {
			return fmt.Errorf("window state: a sum: %w", err)
		}
	case *extreme:
		n := r.Uvarint()
		if n > uint64(r.Len()) {
			return binform.ErrCorrupt
		}
		for range n {
			v := r.Value()
			if c := r.Varint(); r.Err() == nil && v != nil {
				x.addN(v, c)
			}
		}
		x.best, x.ibestOK = nil, false // found again by result
	case *distinct:
		n := r.Uvarint()
		if n > uint64(r.Len()) {
			return binform.ErrCorrupt
		}
		for range n {
			k := string(r.Bytes())
			x.vals[k] = r.Varint()
		}
	case *ordered:
		n := r.Uvarint()
		if n > uint64(r.Len()) {
			return binform.ErrCorrupt
		}
		for range n {
			s := stamp{t: r.Varint()}
			s.ver = r.Version()
			x.vals[s] = r.Value()
		}
	default:
		return fmt.Errorf("window: aggregate state %T", a)
	}
	return r.Err()
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

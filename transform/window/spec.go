package window

import (
	"errors"
	"fmt"
	"time"
)

// Spec is a window kind: tumbling (Advance == Size) or hopping (Advance <
// Size; each event belongs to Size/Advance windows), aligned to the Unix
// epoch (they start at multiples of Advance); or, with Gap set instead,
// sessions (Sessions).
type Spec struct {
	Size    time.Duration
	Advance time.Duration
	Gap     time.Duration
}

// Session is a Spec of session windows closed by gap.
func Session(gap time.Duration) Spec { return Spec{Gap: gap} }

// Tumbling is a Spec of back-to-back windows of size.
func Tumbling(size time.Duration) Spec { return Spec{Size: size, Advance: size} }

// Check reports a Spec that cannot assign events.
func (s Spec) Check() error {
	switch {
	case s.Gap != 0 && (s.Size != 0 || s.Advance != 0):
		return errors.New("a session window has a gap and no size")
	case s.Gap < 0:
		return errors.New("the session gap must be positive")
	case s.Gap > 0:
		if s.Gap%time.Microsecond != 0 {
			return errors.New("the gap is whole microseconds")
		}
		return nil
	case s.Size <= 0:
		return errors.New("the window size must be positive")
	case s.Advance <= 0 || s.Advance > s.Size:
		return fmt.Errorf("the advance must be positive and at most the size (%s)", s.Size)
	case s.Size%time.Microsecond != 0 || s.Advance%time.Microsecond != 0:
		return errors.New("sizes are whole microseconds")
	}
	return nil
}

// Bounds is one window, [Start, End) in Unix microseconds: an event at
// End belongs to the next window.
type Bounds struct{ Start, End int64 }

// Assign appends to dst the windows containing event time t (Unix
// microseconds), earliest first.
func (s Spec) Assign(t int64, dst []Bounds) []Bounds {
	size, adv := s.Size.Microseconds(), s.Advance.Microseconds()
	// The last window starting at or before t, and the earliest that
	// still contains t.
	last := floorDiv(t, adv) * adv
	first := last
	for first-adv+size > t {
		first -= adv
	}
	for start := first; start <= last; start += adv {
		dst = append(dst, Bounds{start, start + size})
	}
	return dst
}

// floorDiv divides rounding towards minus infinity (times before 1970
// are negative).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

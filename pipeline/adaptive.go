package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"time"
)

// adaptive sizes one lane's writes (additive increase, multiplicative
// decrease). A write that times out, that the target refuses as too large
// or that panics is split: the limit drops to half of what was tried and
// the lane writes the same records again in smaller pieces, down to one
// record. A write that succeeds but takes longer than the target latency
// lowers the limit toward the size that would have met it (never below
// floor, so a target whose every write costs the same stays at a useful
// size); a full write within the target raises it by step, up to max.
//
// Splitting keeps the records' order (pieces are written one after the
// other) and a lane marks its items durable only once every piece is
// (Invariant 1), so neither order per key nor the checkpoint depends on
// how a batch was cut.
type adaptive struct {
	max, floor, step int
	target           time.Duration
	limit            int
}

func newAdaptive(most int, target time.Duration) *adaptive {
	return &adaptive{max: most, floor: max(1, most/16), step: max(1, most/20), target: target, limit: most}
}

// size is how many records the next write may hold.
func (a *adaptive) size() int { return a.limit }

// split lowers the limit after a write of n records timed out or was
// refused as too large.
func (a *adaptive) split(n int) { a.limit = max(1, min(a.limit, n/2)) }

// succeeded adapts the limit to a write of n records that took took.
func (a *adaptive) succeeded(n int, took time.Duration) {
	switch {
	case took > a.target && n > a.floor:
		want := int(float64(n) * float64(a.target) / float64(took))
		a.limit = max(a.floor, n/2, want)
	case took <= a.target && n >= a.limit && a.limit < a.max:
		a.limit = min(a.max, a.limit+a.step)
	}
}

type tooLargeError struct{ err error }

func (e tooLargeError) Error() string { return e.err.Error() }
func (e tooLargeError) Unwrap() error { return e.err }

// TooLarge marks err as the target refusing a write for its size (an
// HTTP 413, a full bulk queue, Kafka's MESSAGE_TOO_LARGE): the runtime
// writes the same records again in smaller pieces, and a single record
// still refused goes to the DLQ (Invariant 7).
func TooLarge(err error) error {
	if err == nil {
		return nil
	}
	return tooLargeError{err}
}

// IsTooLarge reports whether err was marked with TooLarge.
func IsTooLarge(err error) bool {
	var t tooLargeError
	return errors.As(err, &t)
}

type overloadedError struct{ err error }

func (e overloadedError) Error() string { return e.err.Error() }
func (e overloadedError) Unwrap() error { return e.err }

// Overloaded marks err as the target refusing a write for its load (a
// full bulk queue: Elasticsearch's es_rejected_execution_exception, HTTP
// 429): the runtime writes the same records again in smaller pieces, like
// after a timeout, and retries a single record with backoff.
func Overloaded(err error) error {
	if err == nil {
		return nil
	}
	return overloadedError{err}
}

// IsOverloaded reports whether err was marked with Overloaded.
func IsOverloaded(err error) bool {
	var o overloadedError
	return errors.As(err, &o)
}

// timedOut reports whether a write that failed with err ran out of time
// at some layer — the runtime's WriteTimeout (attempt ended while ctx
// did not), a deadline of the sink's own, or a network read or write
// deadline — or was refused as Overloaded: either way a smaller write
// may pass.
func timedOut(ctx, attempt context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var ne net.Error
	var o overloadedError
	return attempt.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) || errors.As(err, &o)
}

// PanicError is a panic recovered at a sink's boundary: the write that
// panicked is treated like one the target refused for a record of it,
// split down to the record, which goes to the DLQ with the panic's value.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// guard calls f and turns a panic into a *PanicError.
func guard(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return f()
}

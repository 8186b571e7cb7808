package task

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// RetryPolicy spaces the attempts of a task that fails with a retryable
// error: exponential backoff with jitter.
type RetryPolicy struct {
	// Initial is the delay after the first failed attempt. Must be > 0.
	Initial Duration `json:"initial"`
	// Max caps every delay, jitter included. Must be ≥ Initial.
	Max Duration `json:"max"`
	// Multiplier grows the delay from one attempt to the next. Must be ≥ 1.
	Multiplier float64 `json:"multiplier"`
	// Jitter is the fraction, in [0, 1], by which a delay is randomly
	// lengthened or shortened, so that tasks failing together do not retry
	// together.
	Jitter float64 `json:"jitter"`
}

// DefaultRetry returns the default policy: 1s, doubling, up to 5m, ±20%.
func DefaultRetry() RetryPolicy {
	return RetryPolicy{Initial: Duration(time.Second), Max: Duration(5 * time.Minute), Multiplier: 2, Jitter: 0.2}
}

// Validate names the first field out of range.
func (p RetryPolicy) Validate() error {
	switch {
	case p.Initial <= 0:
		return &ValidationError{Field: "retry.initial", Value: p.Initial.String(), Rule: "must be positive"}
	case p.Max < p.Initial:
		return &ValidationError{Field: "retry.max", Value: p.Max.String(), Rule: "must be at least retry.initial (" + p.Initial.String() + ")"}
	case !(p.Multiplier >= 1) || math.IsInf(p.Multiplier, 0):
		return &ValidationError{Field: "retry.multiplier", Value: strconv.FormatFloat(p.Multiplier, 'g', -1, 64), Rule: "must be a finite number ≥ 1"}
	case !(p.Jitter >= 0 && p.Jitter <= 1):
		return &ValidationError{Field: "retry.jitter", Value: strconv.FormatFloat(p.Jitter, 'g', -1, 64), Rule: "must be in [0, 1]"}
	}
	return nil
}

// Backoff returns the delay after failed attempt number attempt (1 for the
// first): base = min(Initial × Multiplier^(attempt-1), Max), then scaled by
// 1 + Jitter×(2u−1) with u = rnd() in [0, 1), then capped at Max again. So
// the delay lies in [base×(1−Jitter), min(base×(1+Jitter), Max)]. A nil rnd
// uses math/rand/v2. Out-of-range fields are clamped rather than trusted,
// since policies come from stored tasks.
func (p RetryPolicy) Backoff(attempt int, rnd func() float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	lo, hi := float64(max(p.Initial, 0)), float64(max(p.Max, 0))
	mult := p.Multiplier
	if !(mult >= 1) {
		mult = 1
	}
	d := lo * math.Pow(mult, float64(attempt-1))
	if math.IsNaN(d) || d > hi {
		d = hi
	}
	if j := min(max(p.Jitter, 0), 1); j > 0 {
		if rnd == nil {
			rnd = rand.Float64
		}
		u := rnd()
		if !(u >= 0 && u < 1) {
			u = 0.5
		}
		d *= 1 + j*(2*u-1)
	}
	if d > hi {
		d = hi
	}
	return time.Duration(max(d, 0))
}

func (p RetryPolicy) String() string {
	return fmt.Sprintf("{initial %s, max %s, ×%g, ±%g}", p.Initial, p.Max, p.Multiplier, p.Jitter)
}

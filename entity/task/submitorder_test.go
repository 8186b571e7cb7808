package task

import (
	"testing"
	"time"
)

// TestSubmissionTimeNeverRunsBack: a client's submission times follow its
// S3 clock estimate forward but not back, so that its undelayed tasks are
// due, and start, in submission order.
func TestSubmissionTimeNeverRunsBack(t *testing.T) {
	c := &Client{}
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 500_000, time.UTC)
	steps := []struct {
		estimate, want time.Time
	}{
		{t0, t0},
		{t0.Add(-40 * time.Millisecond), t0}, // the estimate stepped back
		{t0.Add(-time.Nanosecond), t0},
		{t0.Add(3 * time.Millisecond), t0.Add(3 * time.Millisecond)},
		{t0.Add(3 * time.Millisecond), t0.Add(3 * time.Millisecond)},
	}
	var prevDue time.Time
	for i, s := range steps {
		got := c.notBeforeLast(s.estimate)
		if !got.Equal(s.want) {
			t.Fatalf("step %d: estimate %s gave submission time %s, want %s", i, s.estimate.Format(time.StampNano), got.Format(time.StampNano), s.want.Format(time.StampNano))
		}
		if due := ceilMilli(got); due.Before(prevDue) {
			t.Fatalf("step %d: due %s before the previous submission's %s", i, due, prevDue)
		} else {
			prevDue = due
		}
	}
}

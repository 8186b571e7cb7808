package runner

import (
	"context"
	"time"
)

// activitySamples is how many seconds of samples the rates span.
const activitySamples = 10

// activity measures the runner's rates of served calls and completed
// tasks from the host's counters, sampled once a second by a goroutine of
// the runner's lifecycle.Stopper: the rate is the change over the last
// activitySamples seconds (less just after the start).
type activity struct {
	samples [activitySamples + 1]activitySample
	n       int // samples taken (the ring's next slot is n % len)
}

type activitySample struct {
	at           time.Time
	calls, tasks uint64
}

// sampleActivity samples the host's counters every second until ctx ends.
func (r *Runner) sampleActivity(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	r.takeSample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.takeSample()
		}
	}
}

func (r *Runner) takeSample() {
	_, host := r.parts()
	if host == nil {
		return
	}
	a := host.Activity()
	s := activitySample{at: time.Now(), calls: a.Messages, tasks: a.TasksCompleted}
	r.mu.Lock()
	r.act.samples[r.act.n%len(r.act.samples)] = s
	r.act.n++
	r.mu.Unlock()
}

// rates returns calls and tasks per second over the samples (nil before
// two samples exist). Under r.mu.
func (a *activity) rates() (calls, tasks *float64) {
	if a.n < 2 {
		return nil, nil
	}
	last := a.samples[(a.n-1)%len(a.samples)]
	first := a.samples[0]
	if a.n > len(a.samples) {
		first = a.samples[a.n%len(a.samples)]
	}
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return nil, nil
	}
	c := float64(last.calls-first.calls) / dt
	t := float64(last.tasks-first.tasks) / dt
	return &c, &t
}

package s3coord

import (
	"context"
	"sync"
	"time"
)

// poller is one poll loop of a store, shared by every watcher of a kind
// (membership, config): it reads the state (read), publishes it, and
// sleeps an adaptive interval: the minimum right after a change, doubling
// towards the maximum while nothing changes, and never past the moment due
// says the state may change by itself (a lease reaching its expiry). It
// runs while it has subscribers. Subscribers each keep the state they last
// saw and turn the difference into events, so a slow consumer delays no
// other, and states it had no time to see are coalesced, as polling
// coalesces changes anyway.
type poller[S any] struct {
	s    *Store
	name string
	read func(context.Context) (S, error)
	same func(S, S) bool
	due  func(S) time.Duration // nil: the state changes only by writes

	kick chan struct{} // poll now

	mu      sync.Mutex
	running bool
	subs    int
	cur     S
	seq     int64         // successful polls
	fails   int64         // failed polls
	notify  chan struct{} // closed and replaced at every poll
	lastErr error
}

func newPoller[S any](s *Store, name string, read func(context.Context) (S, error), same func(S, S) bool, due func(S) time.Duration) *poller[S] {
	return &poller[S]{s: s, name: name, read: read, same: same, due: due, kick: make(chan struct{}, 1), notify: make(chan struct{})}
}

// update is what a subscriber is handed.
type update[S any] struct {
	state S
	// first: the subscriber's first state, read after it subscribed.
	first bool
	// resync: the first state after an interruption.
	resync bool
	// interrupted: polls failed since the last state handed over; state is
	// unset. A state marked resync follows once a poll succeeds.
	interrupted bool
}

// kickAfterWrite asks a running poller to poll now: this store just wrote
// something its watchers are waiting to see.
func (p *poller[S]) kickAfterWrite() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// subscribe hands deliver every state polled after the call, until ctx or
// the store ends or deliver returns false; then it calls done. deliver
// runs on a goroutine of the subscriber's own.
func (p *poller[S]) subscribe(ctx context.Context, done func(), deliver func(context.Context, update[S]) bool) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(p.s.ctx, cancel)
	p.mu.Lock()
	p.subs++
	seenSeq, seenFails := p.seq, p.fails
	if !p.running && p.s.ctx.Err() == nil {
		p.running = true
		p.s.wg.Add(1)
		go p.run()
	}
	p.mu.Unlock()
	p.kickAfterWrite() // the new subscriber wants a fresh state now
	p.s.wg.Add(1)
	go func() {
		defer p.s.wg.Done()
		defer done()
		defer stop()
		defer cancel()
		defer func() {
			p.mu.Lock()
			p.subs--
			p.mu.Unlock()
		}()
		first, interrupted := true, false
		for {
			p.mu.Lock()
			notify, seq, fails, cur := p.notify, p.seq, p.fails, p.cur
			p.mu.Unlock()
			if fails > seenFails && !first && !interrupted {
				if !deliver(ctx, update[S]{interrupted: true}) {
					return
				}
				interrupted = true
			}
			if seq > seenSeq {
				resync := !first && (interrupted || fails > seenFails)
				if !deliver(ctx, update[S]{state: cur, first: first, resync: resync}) {
					return
				}
				first, interrupted = false, false
				seenSeq, seenFails = seq, fails
			}
			select {
			case <-ctx.Done():
				return
			case <-notify:
			}
		}
	}()
}

func (p *poller[S]) run() {
	defer p.s.wg.Done()
	o := p.s.opts
	interval, idle := o.minPoll, 0
	// Since Go 1.23 a stopped or reset timer delivers no stale tick, so
	// the timer is reused without draining.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		st, err := p.read(p.s.ctx)
		if p.s.ctx.Err() != nil {
			p.mu.Lock()
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Lock()
		changed := false
		if err != nil {
			if p.lastErr == nil {
				o.logger.Warn("s3coord: poll failed; watchers are told, and re-listed once a poll succeeds", "kind", p.name, "err", err)
			}
			p.fails++
		} else {
			if p.lastErr != nil {
				o.logger.Info("s3coord: poll succeeded again", "kind", p.name)
			}
			changed = p.seq == 0 || !p.same(p.cur, st)
			p.cur = st
			p.seq++
		}
		p.lastErr = err
		close(p.notify)
		p.notify = make(chan struct{})
		if p.subs == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()

		interval, idle = nextInterval(o, interval, idle, changed)
		wait := interval
		if err == nil && p.due != nil {
			if d := p.due(st); d > 0 && d < wait {
				wait = max(d, o.minPoll)
			}
		}
		timer.Reset(wait)
		select {
		case <-p.s.ctx.Done():
			p.mu.Lock()
			p.running = false
			p.mu.Unlock()
			return
		case <-p.kick:
			timer.Stop()
			interval, idle = o.minPoll, 0
		case <-timer.C:
		}
	}
}

// hotPolls is how many polls in a row find nothing new before the interval
// starts to back off: changes come in bursts (a handoff is a release, then
// an acquire), so the poller stays quick for a few polls after one.
const hotPolls = 5

// nextInterval is the poll interval after a poll: the minimum after a
// change and for hotPolls polls more, then doubling up to the maximum.
func nextInterval(o options, interval time.Duration, idle int, changed bool) (time.Duration, int) {
	if changed {
		return o.minPoll, 0
	}
	idle++
	if idle <= hotPolls {
		return o.minPoll, idle
	}
	return min(2*interval, o.maxPoll), idle
}

// send delivers v on ch unless ctx ends first.
func send[T any](ctx context.Context, ch chan<- T, v T) bool {
	select {
	case ch <- v:
		return true
	case <-ctx.Done():
		return false
	}
}

package sharding

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/storage"
)

// keepAlive renews ss's lease on the Config's cadence (KeepAliveInterval
// from one send to the next, KeepAliveTimeout per call, retries from
// storage.DefaultKeepAliveRetryBackoff after a failure) and feeds every
// result to the machine, in order, as it comes: first the registration's
// grant, then each keep-alive. Nothing is coalesced, so nothing needs
// rebuilding, and the lease deadline is derived once, by the machine. It
// returns when the session ends (lease lost, Orphan or Close).
func (m *Manager) keepAlive(ss storage.Session) {
	f := &keepAliveFeed{m: m, lease: ss.LeaseID()}
	f.result(ss.Granted(), nil)
	storage.KeepAliveLoop(context.Background(), ss, storage.KeepAliveCadence{
		Interval:     m.cfg.KeepAliveInterval,
		Timeout:      m.cfg.KeepAliveTimeout,
		RetryBackoff: storage.DefaultKeepAliveRetryBackoff,
	}, f.result)
}

// keepAliveFeed turns one session's keep-alive results into machine
// inputs, metrics and logs. Its methods run on the session's keep-alive
// goroutine only.
type keepAliveFeed struct {
	m      *Manager
	lease  int64
	streak int // consecutive failed keep-alives of this session
}

// result handles one keep-alive result: a success (res confirms the lease
// for res.TTL from res.SentAt), a failure, or the lease found lost.
func (f *keepAliveFeed) result(res storage.KeepAliveResult, err error) {
	m := f.m
	if !res.SentAt.IsZero() && !res.AnsweredAt.IsZero() {
		m.metrics.keepAliveRTT.Observe(res.AnsweredAt.Sub(res.SentAt).Seconds())
	}
	switch {
	case err == nil:
		m.machine.KeepAliveOK(f.lease, res.SentAt, res.TTL)
		if f.streak > 0 {
			m.log.Info("lease keep-alive recovered", "after_failures", f.streak, "deadline_lag", f.deadlineLag())
			m.emit(Event{Kind: EventKeepAliveRecovered, At: time.Now(), LeaseID: f.lease, Streak: f.streak})
		}
		f.streak = 0
		m.metrics.keepAliveStreak.Set(0)
	case errors.Is(err, storage.ErrLeaseLost):
		// The loss is the streak's last failure, counted as such, but the
		// machine hears it as what it is.
		f.failed()
		m.metrics.leaseLost.Inc()
		// Only enforce mode detaches on it: observe and off report the
		// decision and interrupt nothing (a handler whose task claim can
		// no longer be renewed is stopped by the claim's own guard).
		msg := "lease lost; detaching and registering again"
		if mode := m.machine.Config().Mode; mode != detachment.ModeEnforce {
			msg = fmt.Sprintf("lease lost; registering again (%s mode: not detaching, running work goes on)", mode)
		}
		m.log.Warn(msg, "lease", fmt.Sprintf("%x", f.lease), "err", err)
		m.machine.LeaseLost(f.lease)
		m.emit(Event{Kind: EventLeaseLost, At: time.Now(), LeaseID: f.lease, Streak: f.streak, Err: err})
		m.reregister.fire()
	default:
		m.machine.KeepAliveFailed(f.lease, err)
		if f.streak == 0 {
			m.log.Warn("lease keep-alive failing", "deadline_lag", f.deadlineLag(), "err", err)
			m.emit(Event{Kind: EventKeepAliveFailed, At: time.Now(), LeaseID: f.lease, Streak: 1, Err: err})
		}
		f.failed()
	}
}

// failed counts one failed keep-alive.
func (f *keepAliveFeed) failed() {
	f.streak++
	f.m.metrics.keepAliveFailures.Inc()
	f.m.metrics.keepAliveStreak.Set(float64(f.streak))
}

// deadlineLag is the machine's lease deadline minus now, for logs.
func (f *keepAliveFeed) deadlineLag() time.Duration {
	return time.Until(f.m.machine.State().Deadline)
}

package sharding

import "time"

// EventKind names an Event.
type EventKind string

const (
	// EventKeepAliveFailed: a keep-alive of the lease failed after one
	// that succeeded (the first failure of a streak; the next failures of
	// the streak are not reported one by one).
	EventKeepAliveFailed EventKind = "keepalive_failed"
	// EventKeepAliveRecovered: a keep-alive succeeded after a streak of
	// failures (Streak of them).
	EventKeepAliveRecovered EventKind = "keepalive_recovered"
	// EventLeaseLost: etcd said the lease is gone; the manager registers
	// again under a new one.
	EventLeaseLost EventKind = "lease_lost"
)

// Event is something that happened to the runner's lease, for a status
// page's timeline (WithEvents). The detachment machine's transitions are
// reported by the machine itself (Manager.Machine().Subscribe).
type Event struct {
	Kind    EventKind
	At      time.Time
	LeaseID int64
	// Streak is the number of consecutive failed keep-alives: 1 for the
	// first failure, the length of the streak that ended for a recovery.
	Streak int
	// Err is the failure (nil for a recovery).
	Err error
}

// WithEvents has the manager call fn with every Event, synchronously, on
// the lease's keep-alive goroutine: fn must be quick and must not call
// the manager (record the event and return). Default: none.
func WithEvents(fn func(Event)) Option { return func(o *managerOptions) { o.events = fn } }

// emit reports e to the WithEvents function, if any.
func (m *Manager) emit(e Event) {
	if m.events != nil {
		m.events(e)
	}
}

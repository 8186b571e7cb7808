package detachment

import "context"

// Enforcement is what work started now may promise about this runner's
// detachment, for the sake of whoever takes the work over later.
//
// A successor may take over a task at once, without waiting for its claim to
// lapse, only if the claim's holder was certain to stop the task before its
// runner lease could expire. Enforce mode gives that certainty while it
// lasts, but the mode can change at run time (a staged rollout going back to
// observe or off), and a runner cut off from etcd keeps running in those
// modes. So the promise is made per piece of work: work started while
// Enforced is true and bound to Ctx stops when the detachment decision
// detaches, in every mode, which is before the lease deadline whatever the
// mode becomes later.
type Enforcement struct {
	// Enforced reports that the runner enforces detachment now: mode
	// enforce, attached. Only then may a claim say that its holder stops
	// before its lease expires.
	Enforced bool
	// Ctx is the decision context: it ends, with a *DetachedError as its
	// cause, the moment the decision detaches (lease deadline − margin, a
	// keep-alive failure streak, a storage error past its grace, a lost
	// lease, an explicit Detach or the machine's stop), in every mode. It
	// is live whenever Enforced is true. While the decision is detached it
	// is the last decision context, already cancelled.
	Ctx context.Context
	// Hold reports that nothing may start now: mode enforce, and the
	// runner detached. Work already bound to Ctx stops with it; work not
	// bound to it (a claim made while detached is not enforced) must
	// check Hold before it starts, since the shard's own context ends
	// only when the sharding manager has handled the detachment, a moment
	// later. In observe and off modes work goes on: Hold is false.
	Hold bool
}

// Enforcement returns what work started now may promise (see Enforcement).
// Subscribers may call it.
func (m *Machine) Enforcement() Enforcement {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Enforcement{
		Enforced: m.cfg.Mode == ModeEnforce && m.attached && m.dAttached,
		Ctx:      m.dctx,
		Hold:     m.cfg.Mode == ModeEnforce && !(m.attached && m.dAttached),
	}
}

// Package detachment decides whether a runner is attached: whether its etcd
// lease is known to be alive with a safety margin to spare, so that its
// shard entities may run.
//
// It is a pure state machine over an injected Clock. It performs no I/O and
// starts no goroutine: the caller feeds it every keep-alive result, in
// order, as raw facts (KeepAliveOK with the send time and granted TTL,
// KeepAliveFailed, LeaseLost) and storage-call outcomes (StorageError,
// StorageOK), and it reports transitions (Attached, Detached, and in
// observe mode WouldDetach, WouldAttach) to its subscribers, which turn
// them into metrics and logs.
//
// # Decisions
//
// The lease deadline is conservative: each confirmed keep-alive moves it to
// at least its send time plus the TTL etcd granted. The machine is the one
// place it is computed; the storage session reports no deadline. When the clock reaches
// deadline - DetachMargin the runner detaches, whatever else happens; that
// cutoff is the guarantee ("detach before expiry"). Faster paths detach
// earlier: KeepAliveFailureThreshold consecutive keep-alive failures, a
// storage error not followed by a success within StorageErrorGrace, and a
// lost lease. After a detachment the runner re-attaches once healthy signals
// have come without any failure for RecoverWindow and the deadline is more
// than DetachMargin away. The very first confirmed keep-alive attaches at
// once: there is no failure history to recover from.
//
// # Attachment context
//
// Attachment returns one context per attachment (generation); every shard,
// entity and task context of the runner derives from it. A detachment
// cancels it, with a *DetachedError as its cause, before the call or timer
// that caused the detachment returns and before any subscriber hears of it.
//
// # Modes
//
// ModeEnforce acts on the decisions; ModeObserve only reports them as
// WouldDetach and WouldAttach; ModeOff neither acts nor reports. The mode
// can change at run time (SetConfig), so a fleet moves off → observe →
// enforce canary-first. In every mode the first keep-alive is needed to
// attach and an explicit Detach detaches.
//
// # Subscribers
//
// Subscribers are called synchronously, in transition order, exactly once
// per transition, on the goroutine that caused it and without the state lock
// held. They may read the machine (State, Attachment, Config) but must not
// call its input methods synchronously.
package detachment

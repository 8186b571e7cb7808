// Package detachment decides whether a runner is attached: whether its etcd
// lease is known to be alive with a safety margin to spare, so that its
// shard entities may run.
//
// It is a pure state machine over an injected clock. It performs no I/O: the
// caller feeds it keep-alive observations and storage-call outcomes, and it
// reports transitions (attach, detach, would-detach) to its subscribers.
package detachment

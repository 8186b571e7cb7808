// Package lifecycle owns goroutine lifetimes and shutdown order, in the
// spirit of CockroachDB's util/stop: a Stopper starts named tasks, refuses
// new ones once it quiesces, and waits for the running ones, naming those
// that overrun; a Shutdown runs named steps in the written order (stop
// taking work, drain, release, close), so that the order a component stops
// in reads as one list.
//
// The runner, the entity host, the sharding manager and the messaging
// server start their long-lived goroutines through a Stopper, so that
// every goroutine a runner owns is accounted for and a stop that overruns
// says which task did.
package lifecycle

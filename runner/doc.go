// Package runner composes storage, detachment, sharding and the entity host
// into one runner process: its lifecycle, graceful drain and handoff,
// re-registration after lease loss, admin HTTP and configuration.
//
// The built-in task types (echo, sleep, the durable counter) are here; the standalone runner's
// http: and exec: handlers are in package external, so that a service
// embedding a runner does not build them.
package runner

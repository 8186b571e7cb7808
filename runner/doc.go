// Package runner composes storage, detachment, sharding and the entity host
// into one runner process: its lifecycle, graceful drain and handoff,
// re-registration after lease loss, admin HTTP and configuration.
package runner

//go:build integration

package integration

import "time"

// make integration: a long soak with more runners.
func init() {
	soakDuration = 8 * time.Minute
	soakRunners = 5
}

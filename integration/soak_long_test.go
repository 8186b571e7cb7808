//go:build integration

package integration

import "time"

// make integration: a long soak with more runners (TENURE_SOAK_* still
// override it).
func init() {
	soakDuration = 8 * time.Minute
	soakRunners = 5
}

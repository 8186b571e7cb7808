package task

import (
	"crypto/rand"
	"fmt"

	"github.com/google/uuid"
)

// NewID returns a UUIDv7 (RFC 9562 §5.7) in its lowercase 8-4-4-4-12 form.
// The first 48 bits are the Unix time in milliseconds; rand_a (12 bits)
// holds the time's fraction of a millisecond in 256 ns steps (RFC 9562
// §6.2, method 3), and when the clock has not moved past the last id's
// timestamp and fraction, which happens within 256 ns or if the clock
// steps back, the last id's plus one, carrying into the millisecond: ids
// from one process are strictly increasing, as bytes and as strings, even
// thousands within a millisecond. rand_b (62 bits) comes from crypto/rand.
//
// google/uuid's getV7Time (v1.6.0, version7.go) keeps that order under a
// process-wide lock: its (milliseconds << 12 | fraction) only ever grows,
// by one at least.
func NewID() string {
	// From crypto/rand.Reader explicitly rather than uuid.NewV7: another
	// package of the process may switch google/uuid's shared source
	// (uuid.SetRand, uuid.EnableRandPool).
	id, err := uuid.NewV7FromReader(rand.Reader)
	if err != nil {
		// crypto/rand's Reader never fails (it crashes the process
		// instead), unless an application replaced it with one that does.
		panic(fmt.Errorf("task: generating a task id: reading crypto/rand: %w", err))
	}
	return id.String()
}

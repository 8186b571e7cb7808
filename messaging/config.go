package messaging

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// ErrInvalidConfig is matched by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("messaging: invalid config")

// Config holds the settings a Client and a Server share with the cluster.
// Start from DefaultConfig and set Shards.
type Config struct {
	// Shards is the cluster's shard count: both sides compute an entity's
	// shard from it, so it must match the cluster's (sharding) count.
	Shards int
	// Group is the shard group a Client calls an entity type in when the
	// runners' records do not say which group hosts it (runners older than
	// placement by type list no types), and its choice when several groups
	// host it; and the group a Server assumes for a request that names
	// none.
	Group string
	// MaxMessageBytes bounds a request's payload and a reply. The client
	// refuses a larger request before sending it (ErrTooLarge); the server
	// rejects a larger one and fails a larger reply (CODE_TOO_LARGE).
	MaxMessageBytes int
	// DefaultTimeout bounds a call whose context has no deadline: the
	// retries of a call whose owner never comes back stop there.
	DefaultTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential wait between
	// attempts after a refusal or an unsent request. A routing-table change
	// ends the wait early, so these only pace a caller whose view does not
	// move (a holder that is not attached, a dead holder not yet expired).
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// IdleConnTimeout closes a pooled connection to a call address not used
	// for that long: runners that left keep no connection open for good.
	IdleConnTimeout time.Duration
	// StopTimeout bounds Server.Stop's graceful phase when its context has
	// no deadline.
	StopTimeout time.Duration
}

// DefaultConfig returns the defaults: the default group, 4 MiB messages, a
// 30 s default deadline, 2 ms–250 ms backoff, 5 min idle connections.
// Shards is left 0: it must come from the cluster's configuration.
func DefaultConfig() Config {
	return Config{
		Group:           storage.DefaultGroup,
		MaxMessageBytes: 4 << 20,
		DefaultTimeout:  30 * time.Second,
		MinBackoff:      2 * time.Millisecond,
		MaxBackoff:      250 * time.Millisecond,
		IdleConnTimeout: 5 * time.Minute,
		StopTimeout:     10 * time.Second,
	}
}

// Validate reports the first field that is out of range, by name.
func (c Config) Validate() error {
	switch {
	case c.Shards < 1:
		return fmt.Errorf("%w: Shards = %d: want the cluster's shard count (≥ 1)", ErrInvalidConfig, c.Shards)
	case c.Group == "":
		return fmt.Errorf("%w: Group is empty", ErrInvalidConfig)
	case c.MaxMessageBytes < 1:
		return fmt.Errorf("%w: MaxMessageBytes = %d: want > 0", ErrInvalidConfig, c.MaxMessageBytes)
	case c.DefaultTimeout <= 0:
		return fmt.Errorf("%w: DefaultTimeout = %s: want > 0", ErrInvalidConfig, c.DefaultTimeout)
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("%w: MinBackoff = %s, MaxBackoff = %s: want 0 < MinBackoff ≤ MaxBackoff", ErrInvalidConfig, c.MinBackoff, c.MaxBackoff)
	case c.IdleConnTimeout <= 0:
		return fmt.Errorf("%w: IdleConnTimeout = %s: want > 0", ErrInvalidConfig, c.IdleConnTimeout)
	case c.StopTimeout <= 0:
		return fmt.Errorf("%w: StopTimeout = %s: want > 0", ErrInvalidConfig, c.StopTimeout)
	}
	return nil
}

// wireLimit is the gRPC message limit for a payload limit: room for the
// envelope (names, trace context) around a payload at the limit, so that
// the explicit, typed check decides, not gRPC's.
func (c Config) wireLimit() int { return c.MaxMessageBytes + 64<<10 }

// streamWindow and connWindow are the fixed HTTP/2 flow-control windows of
// a call connection whose messages are bounded by wire (Config.wireLimit),
// per stream and per connection: a frame of two messages at the limit in
// flight per stream, four per connection. Fixed windows turn off grpc's
// bandwidth estimator (BDP): its pings and window updates after each burst
// of replies are writes on an idle connection, which would spoil the proof
// that a request queued after the runner closed the connection was never
// written (trackedConn: a write of grpc's own to the dead socket closes it
// first), and cost frames per burst.
func streamWindow(wire int) int32 { return clampWindow(2 * int64(wire)) }

func connWindow(wire int) int32 { return clampWindow(4 * int64(wire)) }

func clampWindow(n int64) int32 { return int32(min(n, math.MaxInt32)) }

package schedule

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultGrace is how late a driver may reach its tick and still count as
// on time. A delayed task starts up to about a second after its time,
// since S3's clock is read from Date headers, to the second (measured:
// median 0.64 s, max 1.06 s with 3 runners); 2 s covers that and a busy
// owner. A failover takes longer (lease TTL, plus the task lease when the
// driver was running), so the ticks of a failover gap are late and the
// catch-up policy decides.
const DefaultGrace = 2 * time.Second

type options struct {
	group    string
	shards   int
	grace    time.Duration
	registry prometheus.Registerer
	logger   *slog.Logger
}

// Option configures a Client.
type Option func(*options)

// WithGroup sets the shard group the client's schedules live in (and fire
// their tasks to). It must be the group of the task.Client given to
// NewClient. Default storage.DefaultGroup.
func WithGroup(g string) Option { return func(o *options) { o.group = g } }

// WithShards sets the number of shards per group, the cluster meta's.
// Required: it places every schedule (ShardOf).
func WithShards(n int) Option { return func(o *options) { o.shards = n } }

// WithGrace sets how late a tick may be reached and still fire on time
// (default DefaultGrace); a later tick is late, and the schedule's
// CatchUp decides. Zero or less keeps the default.
func WithGrace(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.grace = d
		}
	}
}

// WithRegistry registers the fire metrics (tenure_schedule_fires_total,
// tenure_schedule_fire_lag_seconds) on reg. Only a client whose driver
// runs (Register) records them. Default: not registered.
func WithRegistry(reg prometheus.Registerer) Option { return func(o *options) { o.registry = reg } }

// WithLogger sets the logger of the driver's decisions. Default
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

package runner

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
)

// Validate checks every field of c.WithDefaults(), naming the key and the
// bound; it also runs the component configs' own checks.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	bad := func(key string, v any, rule string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidConfig, key, v, rule))
	}
	if !validName.MatchString(c.Cluster) {
		bad("cluster", c.Cluster, "must match "+validName.String())
	}
	if !validName.MatchString(c.RunnerID) {
		bad("runner_id", c.RunnerID, "must match "+validName.String())
	}
	if math.IsNaN(c.Weight) || math.IsInf(c.Weight, 0) || c.Weight < 0 {
		bad("weight", c.Weight, "must be a finite number ≥ 0 (0 drains)")
	}
	if c.Shards < 1 || c.Shards > 65536 {
		bad("shards", c.Shards, "must be in [1, 65536]")
	}
	if len(c.ShardGroups) == 0 {
		bad("shard_groups", c.ShardGroups, "needs at least one group")
	}
	for _, g := range append(append([]string{}, c.ShardGroups...), c.Groups...) {
		if !validName.MatchString(g) {
			bad("groups", g, "must match "+validName.String())
		}
	}
	switch c.Coordination {
	case CoordinationEtcd:
		errs = append(errs, c.validateEtcd()...)
	case CoordinationS3:
		errs = append(errs, c.validateS3Coord()...)
	default:
		bad("coordination", c.Coordination, "must be etcd or s3")
	}
	if c.S3.Bucket == "" {
		bad("s3.bucket", `""`, "required")
	}
	if (c.S3.AccessKey == "") != (c.S3.SecretKey == "") {
		bad("s3.access_key", "(hidden)", "access_key and secret_key go together (or neither, for the default credential chain)")
	}
	if c.S3.RequestTimeout <= 0 {
		bad("s3.request_timeout", c.S3.RequestTimeout, "must be > 0")
	}
	if c.DrainTimeout <= 0 {
		bad("drain_timeout", c.DrainTimeout, "must be > 0")
	}
	if c.Entity.MaxInputSize < 1024 || c.Entity.MaxInputSize > 64<<20 {
		bad("entity.max_input_size", c.Entity.MaxInputSize, "must be in [1 KiB, 64 MiB]")
	}
	errs = append(errs, c.Call.validate()...)
	errs = append(errs, c.validateAdmin()...)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", c.Log.Level, "must be debug, info, warn or error")
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", c.Log.Format, "must be text or json")
	}
	for _, h := range c.Handlers {
		if _, _, ok := strings.Cut(h, "="); !ok {
			bad("handlers", h, "must be TYPE=SPEC")
		}
	}
	for _, s := range c.Singletons {
		if _, _, ok := strings.Cut(s, "="); !ok {
			bad("singletons", s, "must be TYPE=SPEC")
		}
	}
	if err := c.ShardingConfig().Validate(); err != nil {
		errs = append(errs, componentErrors(err)...)
	}
	if err := c.EntityConfig().Validate(); err != nil {
		errs = append(errs, componentErrors(err)...)
	}
	return errors.Join(errs...)
}

// validateEtcd checks the etcd section, which coordination on etcd needs
// (and coordination on S3 ignores).
func (c Config) validateEtcd() []error {
	var errs []error
	bad := func(key string, v any, rule string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidConfig, key, v, rule))
	}
	if len(c.Etcd.Endpoints) == 0 {
		bad("etcd.endpoints", "[]", "at least one endpoint is required (or coordination: s3, which needs no etcd)")
	}
	if (c.Etcd.CertFile == "") != (c.Etcd.KeyFile == "") {
		bad("etcd.cert_file", c.Etcd.CertFile, "cert_file and key_file go together")
	}
	if err := c.Etcd.checkSchemes(); err != nil {
		errs = append(errs, err)
	}
	if c.Etcd.DialTimeout <= 0 || c.Etcd.RequestTimeout <= 0 {
		bad("etcd.request_timeout", c.Etcd.RequestTimeout, "dial and request timeouts must be > 0")
	}
	return errs
}

// validateS3Coord checks the s3coord section. A poll interval past the
// lease TTL would leave a runner blind to a change (an expired lock, a
// drain) for longer than a lease lives, which makes failover as slow as
// the polling, not the TTL.
func (c Config) validateS3Coord() []error {
	var errs []error
	bad := func(key string, v any, rule string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidConfig, key, v, rule))
	}
	p := c.S3Coord
	if p.PollMin <= 0 {
		bad("s3coord.poll_min", p.PollMin, "must be > 0")
	}
	if p.PollMax < p.PollMin {
		bad("s3coord.poll_max", p.PollMax, fmt.Sprintf("must be ≥ s3coord.poll_min (%s)", p.PollMin))
	}
	if ttl := c.Lease.TTL; ttl > 0 && p.PollMax >= ttl {
		bad("s3coord.poll_max", p.PollMax, fmt.Sprintf("must be < lease.ttl (%s): changes would go unseen longer than a lease lives", ttl))
	}
	return errs
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// componentErrors puts the errors of a component config's Validate under
// the runner's prefix: each names the setting by its key, as the component
// reports it (its ConfigError's Setting), and unwraps to the component's
// error.
func componentErrors(err error) []error {
	var out []error
	for _, leaf := range leafErrors(err) {
		out = append(out, settingErrorOf(leaf))
	}
	return out
}

// settingErrorOf is one component config error under the runner's prefix.
func settingErrorOf(err error) error {
	if s, ok := err.(interface{ Setting() string }); ok {
		return &settingError{err: err, setting: s.Setting()}
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
}

// settingError is a component's config error as the runner reports it:
// "runner: invalid config: key = value: rule".
type settingError struct {
	err     error
	setting string
}

func (e *settingError) Error() string   { return ErrInvalidConfig.Error() + ": " + e.setting }
func (e *settingError) Unwrap() []error { return []error{ErrInvalidConfig, e.err} }

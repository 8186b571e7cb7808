package runner

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/sharding"
)

// LeaseKeys are the settings a dynamic config document is checked against
// besides the dynamic keys themselves: a runner's lease, which a document
// cannot change.
var LeaseKeys = []string{"lease.ttl", "lease.keepalive_interval", "lease.keepalive_timeout"}

// DynamicTarget is what a dynamic config document applies to on one
// runner: its id (its rollout bucket), its lease settings and its own
// detachment settings, which the document's keys overlay.
// Config.DynamicTarget is a runner's own; DynamicTargetFrom rebuilds one
// from what a runner reports (/debug/status "static_config").
type DynamicTarget struct {
	RunnerID   string
	Lease      LeaseConfig
	Detachment DetachmentConfig
}

// DynamicTarget returns the target of the runner c configures.
func (c Config) DynamicTarget() DynamicTarget {
	return DynamicTarget{RunnerID: c.RunnerID, Lease: c.Lease, Detachment: c.Detachment}
}

// StaticSettings returns c's values of LeaseKeys and DynamicKeys: what its
// runner reports as "static_config" in /debug/status, so that a tool can
// check a dynamic config document against it (DynamicTargetFrom).
func (c Config) StaticSettings() map[string]string {
	out := map[string]string{}
	for _, k := range append(slices.Clone(LeaseKeys), DynamicKeys...) {
		if v, err := c.Get(k); err == nil {
			out[k] = v
		}
	}
	return out
}

// DynamicTargetFrom rebuilds the target of runner id from settings (key →
// value, as StaticSettings gives them). The keys it lacks take the values
// Load would give a runner that set only those: lease.keepalive_interval
// and detachment.margin a third of lease.ttl, lease.keepalive_timeout a
// sixth, the rest their defaults. So a runner known only by its lease TTL
// (an etcd lease's grant) is checked as a runner of that TTL and default
// settings would be. Keys other than LeaseKeys and DynamicKeys are ignored
// (a newer runner may report more); a value that does not parse is an
// error naming it.
func DynamicTargetFrom(id string, settings map[string]string) (DynamicTarget, error) {
	c := DefaultConfig()
	c.RunnerID = id
	for _, k := range append(slices.Clone(LeaseKeys), DynamicKeys...) {
		v, ok := settings[k]
		if !ok {
			continue
		}
		if err := c.Set(k, v); err != nil {
			return DynamicTarget{}, err
		}
	}
	return c.WithDefaults().DynamicTarget(), nil
}

// CheckDetachment checks detachment settings against a runner's lease
// settings with the rules the runner applies at start-up
// (sharding.Config.Validate, through Config.Validate): a mode it knows,
// positive windows, and a margin that leaves a healthy runner time to
// renew its lease before its cutoff. A runner runs it before it applies a
// dynamic config document (DynamicDoc.ApplyTo), and `tenure config set`
// against every live runner's settings before it writes one; at start-up
// the same rules run as part of Config.Validate.
func CheckDetachment(lease LeaseConfig, det DetachmentConfig) error {
	// The rest of a sharding config is fixed for a running runner and was
	// valid at its start: a default frame around the lease (with the lock
	// refresh that follows the TTL) leaves only these settings to fail.
	sc := sharding.DefaultConfig()
	sc.LeaseTTL, sc.KeepAliveInterval, sc.KeepAliveTimeout = lease.TTL.Std(), lease.KeepAliveInterval.Std(), lease.KeepAliveTimeout.Std()
	sc.LockRefreshInterval = 0 // follows the TTL
	sc.Detachment = det.Machine()
	err := sc.WithDefaults().Validate()
	if err == nil {
		return nil
	}
	var errs []error
	marginBad := false
	for _, leaf := range leafErrors(err) {
		var de *detachment.ConfigError
		if errors.As(leaf, &de) && de.Field == "DetachMargin" {
			marginBad = true
		}
	}
	for _, leaf := range leafErrors(err) {
		var se *sharding.ConfigError
		if errors.As(leaf, &se) && se.Field == "KeepAliveInterval" && lease.KeepAliveInterval > 0 {
			if marginBad {
				continue // the margin's own error says it: not below the TTL
			}
			errs = append(errs, marginTooLarge(lease, det.Margin))
			continue
		}
		errs = append(errs, settingErrorOf(leaf))
	}
	return errors.Join(errs...)
}

// marginTooLarge says why a margin leaves the keep-alive no time, in the
// keys the user sets.
func marginTooLarge(lease LeaseConfig, margin Duration) error {
	ms := func(d Duration) string { return d.Std().Round(time.Millisecond).String() }
	return &KeyError{
		Key:     "detachment.margin",
		Problem: fmt.Sprintf("%s is too large for lease.ttl %s", margin, ms(lease.TTL)),
		Hint: fmt.Sprintf("must be below %s (lease.ttl %s − lease.keepalive_interval %s − lease.keepalive_timeout %s), or a healthy runner detaches before its next keep-alive can renew the lease",
			ms(lease.TTL-lease.KeepAliveInterval-lease.KeepAliveTimeout), ms(lease.TTL), ms(lease.KeepAliveInterval), ms(lease.KeepAliveTimeout)),
	}
}

// leafErrors flattens errors.Join trees into their leaves.
func leafErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	}
	return []error{err}
}

// flatLine keeps a (joined) error to one line, for reports.
func flatLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
}

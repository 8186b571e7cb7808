package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/tenurehq/tenure/detachment"
)

// DynamicKeys are the settings the cluster's dynamic config (the etcd
// "config" key) may change at run time.
var DynamicKeys = []string{
	"detachment.mode",
	"detachment.margin",
	"detachment.recover_window",
	"detachment.keepalive_failure_threshold",
	"detachment.storage_error_grace",
}

// DynamicDoc is the dynamic config document. Base applies to every runner;
// while a change rolls out, Canary (a complete overlay: Base plus the
// change) applies to the runners whose RolloutBucket is below Rollout.
// Runners read it (ParseDynamicDoc, Apply); writing a change is the CLI's
// business (`tenure config set`, in cmd/tenure).
type DynamicDoc struct {
	Version   int64             `json:"version"`          // +1 on every write; exported as tenure_runner_config_version
	Base      map[string]string `json:"base,omitempty"`   // key → value for every runner
	Canary    map[string]string `json:"canary,omitempty"` // key → value for runners under the cut
	Rollout   int               `json:"rollout"`          // percent of runners on Canary, 0–100
	UpdatedAt time.Time         `json:"updated_at"`
	UpdatedBy string            `json:"updated_by,omitempty"`
}

// RolloutBucket places a runner in [0, 100): xxhash64 of its id modulo 100.
// A change rolled out to p percent applies to the runners with bucket < p,
// so raising p only adds runners.
func RolloutBucket(runnerID string) int { return int(xxhash.Sum64String(runnerID) % 100) }

// ParseDynamicDoc decodes and checks a stored document.
func ParseDynamicDoc(b []byte) (DynamicDoc, error) {
	var d DynamicDoc
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return DynamicDoc{}, fmt.Errorf("%w: dynamic config: %w", ErrInvalidConfig, err)
	}
	return d, d.Check()
}

// Check validates the document on its own: known keys, parsable values,
// a rollout in range, and a detachment config that is valid for some lease
// (each runner checks the margin against its own TTL when it applies it).
func (d DynamicDoc) Check() error {
	var errs []error
	if d.Rollout < 0 || d.Rollout > 100 {
		errs = append(errs, fmt.Errorf("%w: rollout %d: must be 0–100", ErrInvalidConfig, d.Rollout))
	}
	for _, layer := range []map[string]string{d.Base, d.Canary} {
		probe := DefaultConfig()
		probe.Lease.TTL = Duration(24 * time.Hour) // the loosest bound: runners check their own
		for k, v := range layer {
			if !slices.Contains(DynamicKeys, k) {
				errs = append(errs, fmt.Errorf("%w: %s cannot change at run time (dynamic keys: %s)", ErrInvalidConfig, k, strings.Join(DynamicKeys, ", ")))
				continue
			}
			if err := probe.Set(k, v); err != nil {
				errs = append(errs, err)
			}
		}
		if err := probe.Detachment.Machine().Validate(probe.Lease.TTL.Std()); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, renameFields(err)))
		}
	}
	return errors.Join(errs...)
}

// For returns the settings that apply to runnerID and whether it is on the
// canary.
func (d DynamicDoc) For(runnerID string) (map[string]string, bool) {
	if d.Canary != nil && RolloutBucket(runnerID) < d.Rollout {
		return d.Canary, true
	}
	return d.Base, false
}

// Apply returns the detachment config c gets from the document: c's own
// settings overlaid with the ones that apply to its runner, validated as a
// start-up config is, against the runner's lease settings (a margin that
// leaves the keep-alive no time to renew before the cutoff is refused at
// run time as it is at start-up).
func (d DynamicDoc) Apply(c Config) (detachment.Config, bool, error) {
	layer, canary := d.For(c.RunnerID)
	for _, k := range slices.Sorted(maps.Keys(layer)) {
		if err := c.Set(k, layer[k]); err != nil {
			return detachment.Config{}, canary, err
		}
	}
	det := c.Detachment.Machine()
	if err := c.ShardingConfig().Validate(); err != nil {
		return detachment.Config{}, canary, fmt.Errorf("%w: dynamic config version %d for runner %s: %w", ErrInvalidConfig, d.Version, c.RunnerID, renameFields(err))
	}
	return det, canary, nil
}

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
		if err := probe.WithDefaults().Detachment.Machine().Validate(probe.Lease.TTL.Std()); err != nil {
			errs = append(errs, componentErrors(err)...)
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

// Apply returns the detachment config the runner of c gets from the
// document: ApplyTo of c's own settings. Runners run it on every document
// they read.
func (d DynamicDoc) Apply(c Config) (detachment.Config, bool, error) {
	return d.ApplyTo(c.DynamicTarget())
}

// ApplyTo returns the detachment config t gets from the document (t's own
// detachment settings overlaid with the layer that applies to its runner)
// and whether that layer is the canary. Settings that CheckDetachment
// refuses with t's lease give a *DynamicRefusal. It is the one check of a
// document against a runner: the runner runs it before applying a
// document (Apply), and `tenure config set` against every live runner
// before writing one, so that the CLI refuses what a runner would.
func (d DynamicDoc) ApplyTo(t DynamicTarget) (detachment.Config, bool, error) {
	layer, canary := d.For(t.RunnerID)
	refuse := func(err error) (detachment.Config, bool, error) {
		return detachment.Config{}, canary, &DynamicRefusal{RunnerID: t.RunnerID, Version: d.Version, Canary: canary, Err: err}
	}
	c := Config{Lease: t.Lease, Detachment: t.Detachment}
	for _, k := range slices.Sorted(maps.Keys(layer)) {
		if !slices.Contains(DynamicKeys, k) {
			return refuse(fmt.Errorf("%w: %s cannot change at run time", ErrInvalidConfig, k))
		}
		if err := c.Set(k, layer[k]); err != nil {
			return refuse(err)
		}
	}
	if err := CheckDetachment(c.Lease, c.Detachment); err != nil {
		return refuse(err)
	}
	return c.Detachment.Machine(), canary, nil
}

// DynamicRefusal is a runner's refusal of a dynamic config document: the
// settings that apply to it would be invalid with its own lease settings,
// or do not parse. It wraps the reason, which wraps ErrInvalidConfig.
type DynamicRefusal struct {
	RunnerID string
	Version  int64 // the document's version
	Canary   bool  // the runner gets the canary layer
	Err      error
}

func (e *DynamicRefusal) Error() string {
	layer := "base"
	if e.Canary {
		layer = "canary"
	}
	return fmt.Sprintf("runner %s refuses dynamic config version %d (its %s layer): %v", e.RunnerID, e.Version, layer, e.Err)
}

// Unwrap returns the reason.
func (e *DynamicRefusal) Unwrap() error { return e.Err }

package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Writing the dynamic config document: the rules `tenure config set` and
// the web console share. A change is checked on its own (DynamicDoc.Check),
// then against every live runner's own settings (CheckAgainstRunners, the
// check each runner makes before applying a document), then written with
// a compare-and-swap on the document's revision
// (UpdateDynamicConfig), retried when someone else wrote first.

// ConfigCASTries bounds how often UpdateDynamicConfig re-reads the
// document after losing a compare-and-swap to another writer.
const ConfigCASTries = 5

// DynamicConfigStore is the part of the runner store a change of the
// dynamic config document reads and writes: a storage.RunnerStore is one.
type DynamicConfigStore interface {
	Config(ctx context.Context) (storage.ConfigValue, error)
	PutConfig(ctx context.Context, value []byte, prevRevision int64) (int64, error)
}

// DynamicChange is one change of the dynamic config document.
type DynamicChange struct {
	// Set gives keys (DynamicKeys) their values.
	Set map[string]string
	// Unset removes keys from the layer the change goes to (the canary
	// below 100%, else the base and the canary): the runners then use
	// their own config for them.
	Unset []string
	// Rollout is the percentage of the runners (by RolloutBucket) that
	// get the change: 100 makes it, and any canary in progress, everyone's
	// base; less puts it in the canary, on top of the base and the canary
	// in progress.
	Rollout int
	// By names the writer (UpdatedBy); Now is the write's time.
	By  string
	Now time.Time
}

// ChangeDynamicDoc returns d after the change c, with the next version.
// It only builds the document: Check it (UpdateDynamicConfig does).
func ChangeDynamicDoc(d DynamicDoc, c DynamicChange) DynamicDoc {
	next := DynamicDoc{Version: d.Version + 1, Rollout: c.Rollout, UpdatedAt: c.Now.UTC(), UpdatedBy: c.By}
	if c.Rollout >= 100 {
		next.Rollout = 100
		next.Base = mergeLayers(d.Base, d.Canary, c.Set)
		for _, k := range c.Unset {
			delete(next.Base, k)
		}
		return next
	}
	next.Base = maps.Clone(d.Base)
	next.Canary = mergeLayers(d.Base, d.Canary, c.Set)
	for _, k := range c.Unset {
		delete(next.Canary, k)
	}
	return next
}

// mergeLayers returns the union of layers, a later layer's value winning.
func mergeLayers(layers ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, l := range layers {
		maps.Copy(out, l)
	}
	return out
}

// CheckUnset checks the keys a change unsets: dynamic keys only.
func CheckUnset(keys []string) error {
	var errs []error
	for _, k := range keys {
		if !slices.Contains(DynamicKeys, k) {
			errs = append(errs, fmt.Errorf("%w: %s cannot change at run time (dynamic keys: %s)", ErrInvalidConfig, k, strings.Join(DynamicKeys, ", ")))
		}
	}
	return errors.Join(errs...)
}

// UpdateDynamicConfig applies change to the stored document (version 0
// when absent) and writes the result if the document has not changed since
// it was read, re-reading and retrying up to ConfigCASTries times
// otherwise (then the error wraps storage.ErrPrecondition). The result is
// checked before it is written: on its own (an error wrapping
// ErrInvalidConfig), then by check (nil: none), the live runners' own
// check. It returns the document written and its revision.
func UpdateDynamicConfig(ctx context.Context, st DynamicConfigStore, change func(DynamicDoc) (DynamicDoc, error),
	check func(DynamicDoc) error) (DynamicDoc, int64, error) {
	var lost error
	for range ConfigCASTries {
		cv, err := st.Config(ctx)
		if err != nil {
			return DynamicDoc{}, 0, err
		}
		var cur DynamicDoc
		if cv.Value != nil {
			// A stored document that decodes but fails the checks is
			// still the base of the change: the checks below run on the
			// result.
			if cur, err = ParseDynamicDoc(cv.Value); err != nil && cur.Version == 0 {
				return DynamicDoc{}, 0, fmt.Errorf("the stored dynamic config (revision %d) does not decode; fix or delete it (etcdctl on etcd, the config object under coord/ on S3): %w", cv.Revision, OneLine(err))
			}
		}
		next, err := change(cur)
		if err != nil {
			return DynamicDoc{}, 0, err
		}
		if err := next.Check(); err != nil {
			return DynamicDoc{}, 0, OneLine(fmt.Errorf("version %d would be invalid; nothing written: %w", next.Version, err))
		}
		if check != nil {
			if err := check(next); err != nil {
				return DynamicDoc{}, 0, err
			}
		}
		b, err := json.Marshal(next)
		if err != nil {
			return DynamicDoc{}, 0, err
		}
		rev, err := st.PutConfig(ctx, b, cv.Revision)
		if errors.Is(err, storage.ErrPrecondition) {
			lost = err
			continue
		}
		if err != nil {
			return DynamicDoc{}, 0, err
		}
		return next, rev, nil
	}
	return DynamicDoc{}, 0, fmt.Errorf("the document kept changing under us (%d tries); try again: %w", ConfigCASTries, lost)
}

// LiveRunner is what a dynamic config change knows of a live runner to
// check a document against it (CheckAgainstRunners).
type LiveRunner struct {
	ID string
	// Reachable: its admin endpoint answered.
	Reachable bool
	// Settings are the settings it reports (/debug/status
	// "static_config"); nil from a runner that did not answer or does not
	// report them.
	Settings map[string]string
	// Lease is its lease as etcd reports it, when it did not answer and
	// etcd did; LeaseErr why that read failed (wrapping
	// storage.ErrNotFound: the lease has ended, the runner is gone).
	Lease    *storage.LeaseTime
	LeaseErr error
}

// Refusal is a live runner's refusal of a document, as predicted before
// writing it.
type Refusal struct {
	// Err is the *DynamicRefusal.
	Err error
	// Assumed says how the runner's settings were assumed when it did not
	// report them ("" when it did).
	Assumed string
}

// CheckAgainstRunners runs each live runner's own check of doc
// (DynamicDoc.ApplyTo) on the settings it reports, or, for a runner that
// does not report them (unreachable, or older), on its lease TTL as etcd
// granted it with the settings that follow from it. It returns the
// refusals, in the order of runners, and notes on the runners it could
// not check.
func CheckAgainstRunners(doc DynamicDoc, runners []LiveRunner) (refusals []Refusal, notes []string) {
	for _, r := range runners {
		settings, assumed := r.Settings, ""
		if !r.Reachable || len(settings) == 0 {
			why := "did not report its settings"
			if !r.Reachable {
				why = "did not answer"
			}
			switch {
			case r.Lease != nil:
				settings = map[string]string{"lease.ttl": r.Lease.Granted.String()}
				assumed = fmt.Sprintf("runner %s %s: checked against its lease TTL %s with the keep-alive settings that follow from it", r.ID, why, r.Lease.Granted)
			case errors.Is(r.LeaseErr, storage.ErrNotFound):
				continue // its lease has ended: it is gone
			default:
				notes = append(notes, fmt.Sprintf("runner %s %s and its lease could not be read (%v): not checked; it checks the document itself", r.ID, why, r.LeaseErr))
				continue
			}
		}
		target, err := DynamicTargetFrom(r.ID, settings)
		if err != nil {
			notes = append(notes, fmt.Sprintf("runner %s reports settings that do not parse (%v): not checked", r.ID, err))
			continue
		}
		if _, _, err := doc.ApplyTo(target); err != nil {
			refusals = append(refusals, Refusal{Err: err, Assumed: assumed})
		}
	}
	return refusals, notes
}

// ErrRefusedByRunners is wrapped by RefusedError's error: live runners
// would refuse the document, so nothing was written.
var ErrRefusedByRunners = errors.New("refused by live runners")

// RefusedError is the one-line error of a change live runners would
// refuse: the first refusal in full, and the other runners that refuse it
// too. It unwraps to the first refusal (a *DynamicRefusal) and to
// ErrRefusedByRunners.
func RefusedError(refusals []Refusal) error {
	first := refusals[0]
	msg := "refused, nothing written: " + OneLine(first.Err).Error()
	if first.Assumed != "" {
		msg += " [" + first.Assumed + "]"
	}
	if n := len(refusals) - 1; n > 0 {
		var others []string
		for _, r := range refusals[1:] {
			var dr *DynamicRefusal
			if errors.As(r.Err, &dr) {
				others = append(others, dr.RunnerID)
			}
		}
		msg += fmt.Sprintf(" (%d other runner(s) refuse it too: %s)", n, strings.Join(others, ", "))
	}
	return &refusedErr{msg: msg, err: first.Err}
}

// refusedErr keeps the refusal for errors.As while its message is the
// summary.
type refusedErr struct {
	msg string
	err error
}

func (e *refusedErr) Error() string   { return e.msg }
func (e *refusedErr) Unwrap() []error { return []error{e.err, ErrRefusedByRunners} }

// OneLine keeps err to one line (joined errors separated by "; ") while
// errors.Is and errors.As still see it; nil stays nil.
func OneLine(err error) error {
	if err == nil || !strings.Contains(err.Error(), "\n") {
		return err
	}
	return lineError{err}
}

type lineError struct{ err error }

func (e lineError) Error() string { return flatLine(e.err) }
func (e lineError) Unwrap() error { return e.err }

package task

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Status is a task's place in its lifecycle (see the package doc).
type Status string

// The statuses. Completed, failed and cancelled are terminal; failed and
// cancelled tasks can be replayed.
const (
	Pending   Status = "pending"
	Running   Status = "running"
	Completed Status = "completed"
	Failed    Status = "failed"
	Cancelled Status = "cancelled"
)

// IsTerminal reports whether the task has finished: completed, failed or
// cancelled.
func (s Status) IsTerminal() bool {
	return s == Completed || s == Failed || s == Cancelled
}

// Valid reports whether s is one of the five statuses.
func (s Status) Valid() bool {
	return s == Pending || s == Running || s.IsTerminal()
}

// Duration is a time.Duration that encodes in JSON as a Go duration string
// ("30s", "5m0s"), so task objects stay readable. It decodes from such a
// string or, leniently, from an integer count of nanoseconds.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d as time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON encodes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON decodes a duration string or an integer of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if json.Unmarshal(b, &n) == nil {
			*d = Duration(n)
			return nil
		}
		return fmt.Errorf("duration %s: want a string such as \"30s\"", abbrev(string(b), 40))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", abbrev(s, 40), err)
	}
	*d = Duration(v)
	return nil
}

// Claim is the claim of a running task: who runs it, under which shard lock
// (Epoch, the fencing token) and until when its lease holds.
type Claim struct {
	RunnerID string `json:"runner_id"`
	// Epoch is the shard lock's epoch (its etcd CreateRevision) when the
	// task was claimed: strictly increasing across shard owners.
	Epoch int64 `json:"epoch"`
	// LeaseID is the runner's etcd lease, the shard lock's identity.
	LeaseID int64 `json:"lease_id"`
	// LeaseExpiresAt is the S3 time after which the claim may be taken by
	// another claimer without a takeover; Renew pushes it.
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	ClaimedAt      time.Time `json:"claimed_at"` // S3 time
	// Enforced is the holder's promise that it stops this attempt before
	// its runner lease can expire: it enforced detachment when it claimed
	// the task and keeps the attempt bound to its detachment decision for
	// the attempt's whole life, whatever its mode becomes. Only then may a
	// new shard owner take the task over at once; otherwise (an observe or
	// off runner, which keeps running when cut off from etcd, or a claim
	// written before this field existed) it waits for LeaseExpiresAt.
	Enforced bool `json:"enforced,omitempty"`
}

// ClaimInfo is what a claimer brings to ClaimFor and TakeOver.
type ClaimInfo struct {
	RunnerID string
	Epoch    int64         // the shard lock's epoch
	LeaseID  int64         // the runner's lease id
	Lease    time.Duration // how long the claim holds before it must be renewed
	// Enforced: the claimer promises to stop the attempt before its lease
	// expires (see Claim.Enforced).
	Enforced bool
}

func (c ClaimInfo) validate() error {
	if c.RunnerID == "" {
		return &ValidationError{Field: "ClaimInfo.RunnerID", Rule: "must not be empty"}
	}
	if c.Lease <= 0 {
		return &ValidationError{Field: "ClaimInfo.Lease", Value: c.Lease.String(), Rule: "must be positive"}
	}
	return nil
}

// same reports whether the claim is c's.
func (c ClaimInfo) same(cl *Claim) bool {
	return cl != nil && cl.RunnerID == c.RunnerID && cl.Epoch == c.Epoch && cl.LeaseID == c.LeaseID
}

// Transition is one entry of a task's history.
type Transition struct {
	At      time.Time `json:"at"`               // S3 time
	Event   string    `json:"event"`            // one of the Event constants
	Runner  string    `json:"runner,omitempty"` // the runner concerned, if any
	Attempt int       `json:"attempt"`          // Task.Attempt after the transition
	Detail  string    `json:"detail,omitempty"`
}

// Events recorded in Task.History.
const (
	EventSubmitted       = "submitted"
	EventClaimed         = "claimed"
	EventTakenOver       = "taken_over"
	EventRenewed         = "renewed"
	EventCompleted       = "completed"
	EventFailed          = "failed"
	EventRetrying        = "retrying"
	EventRequeued        = "requeued"
	EventCancelRequested = "cancel_requested"
	EventCancelled       = "cancelled"
	EventReplayed        = "replayed"
	EventCorrupt         = "corrupt"
	EventPurging         = "purging"
)

// Corrupt encodings (Task.CorruptEncoding).
const (
	// CorruptText: Corrupt holds the raw body (valid UTF-8).
	CorruptText = ""
	// CorruptBase64: Corrupt holds the raw body in standard base64, because
	// the body was not valid UTF-8 and a JSON string would not keep it.
	CorruptBase64 = "base64"
	// CorruptNone: no bytes were kept (the body was empty or too large to
	// read); Corrupt describes it.
	CorruptNone = "none"
)

// Task is a durable task as stored at TaskKey(Shard, ID). Times are S3
// times (Store.Now), in UTC.
//
// The transitions (ClaimFor, Complete, Fail, ...) are pure methods that change
// the task in memory; Store.Write commits the change with a compare-and-swap
// on the object's ETag.
type Task struct {
	// ID is a UUIDv7 (NewID) or the caller's idempotency id; see ValidateID.
	ID   string `json:"id"`
	Type string `json:"type"`
	// Entity is the entity id the task is addressed to. Tasks of one
	// (type, entity) share a shard and run one at a time; tasks without an
	// entity run concurrently.
	Entity string          `json:"entity,omitempty"`
	Shard  storage.ShardID `json:"-"` // encoded as "shard": "group/index"
	// Op names the operation of the entity type that runs the task (see
	// entity.Define); empty runs the type's default operation, or the
	// handler of a type registered without operations.
	Op string `json:"op,omitempty"`
	// Input is the handler's argument: valid JSON or empty.
	Input  json.RawMessage `json:"input,omitempty"`
	Status Status          `json:"status"`
	// Attempt counts the claims made so far (Requeue gives one back).
	Attempt     int         `json:"attempt"`
	MaxAttempts int         `json:"max_attempts"`
	Timeout     Duration    `json:"timeout,omitempty"` // per attempt
	Retry       RetryPolicy `json:"retry"`
	// AvailableAt is when the task is due; a time at or before CreatedAt
	// means at once. Kept to whole milliseconds, the pointer key's
	// precision.
	AvailableAt time.Time `json:"available_at"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"` // set by every Store write
	// Claim is the current claim while running, nil otherwise. (The
	// transition is the ClaimFor method: Go allows no method named like a
	// field.)
	Claim  *Claim          `json:"claim,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the last failed attempt's error, cleared on completion.
	Error           string `json:"error,omitempty"`
	CancelRequested bool   `json:"cancel_requested,omitempty"`
	// Purging is set (S3 time) once a retention purge (Store.Purge) has
	// claimed the finished task for deletion: nothing changes such a task
	// any more (Replay refuses it with ErrPurging), so deleting it cannot
	// undo a replay. The object is normally gone one request later.
	Purging time.Time `json:"purging,omitzero"`
	// Trace is the W3C traceparent of the submit span (see SpanContext).
	Trace string `json:"trace,omitempty"`
	// Rev counts the object's writes. Every write increments it, so every
	// write changes the body, and with it the ETag (S3's is the body's MD5).
	Rev int64 `json:"rev"`
	// History holds the newest transitions, at most the history limit
	// (DefaultHistoryLimit unless configured); HistoryDropped counts the
	// older ones dropped.
	History        []Transition `json:"history"`
	HistoryDropped int          `json:"history_dropped,omitempty"`
	// Corrupt is set only on a task whose stored body could not be used: it
	// keeps the raw body (at most MaxCorruptKeep bytes, encoded as
	// CorruptEncoding says) so that a failed copy can replace the object
	// without losing what was there. See Store.Load and MarkCorrupt.
	Corrupt         string `json:"corrupt,omitempty"`
	CorruptEncoding string `json:"corrupt_encoding,omitempty"`
	CorruptSize     int64  `json:"corrupt_size,omitempty"` // the raw body's full size

	histLimit int            // 0: DefaultHistoryLimit
	rnd       func() float64 // jitter source; nil: math/rand/v2
}

// taskFields has Task's fields and none of its methods, for the JSON codec.
type taskFields Task

// MarshalJSON encodes the task, with Shard as "group/index".
func (t Task) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		taskFields
		Shard string `json:"shard"`
	}{taskFields(t), t.Shard.String()})
}

// UnmarshalJSON decodes a task encoded by MarshalJSON.
func (t *Task) UnmarshalJSON(b []byte) error {
	w := struct {
		*taskFields
		Shard *string `json:"shard"`
	}{taskFields: (*taskFields)(t)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Shard == nil {
		return fmt.Errorf("task: no shard field")
	}
	s, err := parseShard(*w.Shard)
	if err != nil {
		return fmt.Errorf("task: shard %q: %s", abbrev(*w.Shard, 80), err)
	}
	t.Shard = s
	return nil
}

// Ref returns "group/index/id", the handle every API and the CLI use.
func (t *Task) Ref() string { return Ref(t.Shard, t.ID) }

// Key returns the task's object key, TaskKey(t.Shard, t.ID).
func (t *Task) Key() string { return TaskKey(t.Shard, t.ID) }

// IsDue reports whether a pending task may be claimed at now. A task
// submitted to run at once (AvailableAt no later than CreatedAt, to the
// millisecond) and not yet failed is always due: its available_at is the
// submitter's reading of the S3 clock, which another reader's may trail by
// the estimate's uncertainty, and it asked for no delay. A retry's
// available_at comes from the runner's reading, which may in turn trail the
// submitter's CreatedAt; it is honoured against now whatever CreatedAt says.
func (t *Task) IsDue(now time.Time) bool {
	if t.Attempt == 0 && !t.AvailableAt.After(ceilMilli(t.CreatedAt)) {
		return true
	}
	return !t.AvailableAt.After(now)
}

// Clone returns a deep copy of t (its configuration included).
func (t *Task) Clone() *Task {
	c := *t
	c.Input = slices.Clone(t.Input)
	c.Result = slices.Clone(t.Result)
	c.History = slices.Clone(t.History)
	if t.Claim != nil {
		cl := *t.Claim
		c.Claim = &cl
	}
	return &c
}

// HeldBy reports whether t is running under c's claim (same runner, epoch
// and lease). An executor checks it before committing an outcome; the
// compare-and-swap of Store.Write is what makes the check stick.
func (t *Task) HeldBy(c ClaimInfo) bool { return t.Status == Running && c.same(t.Claim) }

// SetHistoryLimit sets how many transitions the task keeps (n < 1: the
// default). Store sets it on every task it loads or creates.
func (t *Task) SetHistoryLimit(n int) { t.histLimit = n }

// SetRand sets the jitter source of Fail's backoff: f returns values in
// [0, 1) and must be safe for concurrent use if shared. Nil restores the
// default (math/rand/v2). Store sets it on every task it loads or creates.
func (t *Task) SetRand(f func() float64) { t.rnd = f }

func abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

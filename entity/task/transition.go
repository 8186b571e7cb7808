package task

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// This file holds the pure transitions. Each takes now, an S3 time, changes
// the task in memory and appends to its history; none does I/O. The caller
// commits the change with Store.Write, whose compare-and-swap fences it
// against concurrent writers.

// ClaimFor makes a pending, due task running under c's claim: Attempt+1 and a
// lease until now+c.Lease. It also takes a running task whose lease has
// expired at now (its runner stopped renewing), provided c's epoch is not
// older than that claim's. Refusals are *TransitionError wrapping
// ErrTerminal, ErrCancelRequested (FinishCancel it instead), ErrClaimed
// (Due = the live lease's expiry), ErrStaleEpoch, ErrNotDue (as a
// *NotDueError; Due = the task's available_at) or ErrAttemptsExhausted
// (Fail it instead); in that order of precedence.
func (t *Task) ClaimFor(now time.Time, c ClaimInfo) error {
	if err := c.validate(); err != nil {
		return err
	}
	if err := t.claimable("claim"); err != nil {
		return err
	}
	detail := ""
	switch t.Status {
	case Pending:
		if !t.IsDue(now) {
			return &NotDueError{t.refuse("claim", ErrNotDue, t.AvailableAt, "")}
		}
	case Running:
		if old := t.Claim; old != nil {
			if c.Epoch < old.Epoch {
				return t.refuse("claim", ErrStaleEpoch, time.Time{}, fmt.Sprintf("epoch %d < %d", c.Epoch, old.Epoch))
			}
			if !now.After(old.LeaseExpiresAt) {
				return t.refuse("claim", ErrClaimed, old.LeaseExpiresAt, "held by runner "+old.RunnerID)
			}
			detail = fmt.Sprintf("lease of runner %s (epoch %d) expired at %s", old.RunnerID, old.Epoch, old.LeaseExpiresAt.UTC().Format(time.RFC3339Nano))
		}
	}
	if t.Attempt >= t.MaxAttempts {
		return t.refuse("claim", ErrAttemptsExhausted, time.Time{}, fmt.Sprintf("%d of %d attempts made", t.Attempt, t.MaxAttempts))
	}
	t.claim(now, c)
	t.record(now, EventClaimed, c.RunnerID, detail)
	return nil
}

// TakeOver moves a running task to c's claim at once, without waiting for
// the current lease to expire: the new shard owner reclaims tasks left
// running by an older epoch or by a runner known to be detached. Attempt+1,
// since the interrupted attempt may have had effects. The history entry
// reads "taken over: <reason>". Refusals: ErrTerminal, ErrInvalidTransition
// (not running, or c already holds the claim), ErrCancelRequested,
// ErrStaleEpoch, ErrAttemptsExhausted.
func (t *Task) TakeOver(now time.Time, c ClaimInfo, reason string) error {
	if err := c.validate(); err != nil {
		return err
	}
	if err := t.claimable("takeover"); err != nil {
		return err
	}
	if t.Status != Running {
		return t.refuse("takeover", ErrInvalidTransition, time.Time{}, "only a running task can be taken over; claim a pending one")
	}
	old := t.Claim
	prev := "no previous claim"
	if old != nil {
		if c.same(old) {
			return t.refuse("takeover", ErrInvalidTransition, time.Time{}, "the claim is already the caller's")
		}
		if c.Epoch < old.Epoch {
			return t.refuse("takeover", ErrStaleEpoch, time.Time{}, fmt.Sprintf("epoch %d < %d", c.Epoch, old.Epoch))
		}
		prev = fmt.Sprintf("from runner %s, epoch %d", old.RunnerID, old.Epoch)
	}
	if t.Attempt >= t.MaxAttempts {
		return t.refuse("takeover", ErrAttemptsExhausted, time.Time{}, fmt.Sprintf("%d of %d attempts made", t.Attempt, t.MaxAttempts))
	}
	t.claim(now, c)
	t.record(now, EventTakenOver, c.RunnerID, "taken over: "+reason+" ("+prev+")")
	return nil
}

// claimable refuses terminal and cancel-requested tasks.
func (t *Task) claimable(op string) error {
	switch {
	case t.Status.IsTerminal():
		return t.refuse(op, ErrTerminal, time.Time{}, "")
	case t.CancelRequested:
		return t.refuse(op, ErrCancelRequested, time.Time{}, "")
	case t.Status != Pending && t.Status != Running:
		return t.refuse(op, ErrInvalidTransition, time.Time{}, "unknown status")
	}
	return nil
}

func (t *Task) claim(now time.Time, c ClaimInfo) {
	t.Status = Running
	t.Attempt++
	t.Claim = &Claim{RunnerID: c.RunnerID, Epoch: c.Epoch, LeaseID: c.LeaseID,
		LeaseExpiresAt: now.Add(c.Lease).UTC(), ClaimedAt: now.UTC(), Enforced: c.Enforced}
}

// Renew extends a running task's lease to now+lease. Consecutive renewals
// of one attempt share one history entry (its time and count updated), so
// that renewals do not push the history out.
func (t *Task) Renew(now time.Time, lease time.Duration) error {
	if lease <= 0 {
		return &ValidationError{Field: "lease", Value: lease.String(), Rule: "must be positive"}
	}
	if err := t.mustRun("renew"); err != nil {
		return err
	}
	t.Claim.LeaseExpiresAt = now.Add(lease).UTC()
	detail := "lease until " + t.Claim.LeaseExpiresAt.Format(time.RFC3339Nano)
	if n := len(t.History); n > 0 {
		if last := &t.History[n-1]; last.Event == EventRenewed && last.Attempt == t.Attempt && last.Runner == t.Claim.RunnerID {
			count := 1
			fmt.Sscanf(last.Detail, "renewed %d×", &count)
			last.At = now.UTC()
			last.Detail = fmt.Sprintf("renewed %d×, %s", count+1, detail)
			return nil
		}
	}
	t.record(now, EventRenewed, t.Claim.RunnerID, "renewed 1×, "+detail)
	return nil
}

// Complete ends a running task successfully with result (valid JSON or
// empty). The claim and any earlier error are cleared.
func (t *Task) Complete(now time.Time, result json.RawMessage) error {
	if err := t.mustRun("complete"); err != nil {
		return err
	}
	if err := validateJSON("result", result); err != nil {
		return err
	}
	runner := t.Claim.RunnerID
	t.Status = Completed
	t.Result = slices.Clone(result)
	t.Error = ""
	t.Claim = nil
	t.record(now, EventCompleted, runner, "")
	return nil
}

// Fail records a failed attempt (err's text, truncated to 4 KiB, in Error)
// and clears the claim. A permanent error, or a task that has used
// MaxAttempts, ends failed (final); a task whose cancellation was requested
// ends cancelled (final); otherwise the task goes back to pending, due at
// retryAt = now + Retry.Backoff(Attempt). Fail also applies to a pending
// task (a claimer that finds it cannot run it, such as an unknown type).
// On a task already terminal it changes nothing and reports final.
//
// A retry changes the task's pointer key: the caller writes the new pointer
// (Store.PutPointer) before committing the task, and deletes the old one
// after, so that the task is never pending without a pointer.
func (t *Task) Fail(now time.Time, err error, permanent bool) (retryAt time.Time, final bool) {
	if t.Status.IsTerminal() {
		return time.Time{}, true
	}
	msg := "unknown error"
	if err != nil {
		msg = err.Error()
	}
	msg = truncate(msg, maxErrorLen)
	runner := ""
	if t.Claim != nil {
		runner = t.Claim.RunnerID
	}
	t.Error = msg
	t.Claim = nil
	switch {
	case t.CancelRequested:
		t.Status = Cancelled
		t.record(now, EventCancelled, runner, "attempt ended with an error after cancellation was requested: "+msg)
		return time.Time{}, true
	case permanent:
		t.Status = Failed
		t.record(now, EventFailed, runner, "permanent error: "+msg)
		return time.Time{}, true
	case t.Attempt >= t.MaxAttempts:
		t.Status = Failed
		t.record(now, EventFailed, runner, fmt.Sprintf("attempt %d of %d failed: %s", t.Attempt, t.MaxAttempts, msg))
		return time.Time{}, true
	}
	t.Status = Pending
	t.AvailableAt = ceilMilli(now.Add(t.Retry.Backoff(t.Attempt, t.rnd)))
	t.record(now, EventRetrying, runner, fmt.Sprintf("attempt %d of %d failed, retry at %s: %s",
		t.Attempt, t.MaxAttempts, t.AvailableAt.Format(time.RFC3339Nano), msg))
	return t.AvailableAt, false
}

// Requeue hands a running task back to pending without counting the attempt
// (Attempt−1): a planned handoff is not the task's failure. AvailableAt is
// unchanged, so the task's pointer key is too.
func (t *Task) Requeue(now time.Time, reason string) error {
	if err := t.mustRun("requeue"); err != nil {
		return err
	}
	runner := t.Claim.RunnerID
	t.Status = Pending
	t.Attempt = max(t.Attempt-1, 0)
	t.Claim = nil
	t.record(now, EventRequeued, runner, reason)
	return nil
}

// RequestCancel cancels a pending task at once, and marks a running one
// CancelRequested so its owner stops the handler and calls FinishCancel.
// On a running task already marked it changes nothing. A terminal task
// refuses with ErrTerminal.
func (t *Task) RequestCancel(now time.Time) error {
	switch t.Status {
	case Pending:
		t.Status = Cancelled
		t.record(now, EventCancelled, "", "cancelled while pending")
		return nil
	case Running:
		if !t.CancelRequested {
			t.CancelRequested = true
			runner := ""
			if t.Claim != nil {
				runner = t.Claim.RunnerID
			}
			t.record(now, EventCancelRequested, runner, "")
		}
		return nil
	case Completed, Failed, Cancelled:
		return t.refuse("cancel", ErrTerminal, time.Time{}, "")
	}
	return t.refuse("cancel", ErrInvalidTransition, time.Time{}, "unknown status")
}

// FinishCancel ends a task whose cancellation was requested: running (its
// handler has stopped) or pending (it was requeued meanwhile) → cancelled.
func (t *Task) FinishCancel(now time.Time) error {
	if t.Status.IsTerminal() {
		return t.refuse("finish cancel", ErrTerminal, time.Time{}, "")
	}
	if !t.CancelRequested {
		return t.refuse("finish cancel", ErrInvalidTransition, time.Time{}, "no cancellation was requested")
	}
	runner := ""
	if t.Claim != nil {
		runner = t.Claim.RunnerID
	}
	t.Status = Cancelled
	t.Claim = nil
	t.record(now, EventCancelled, runner, "handler stopped")
	return nil
}

// Replay gives a failed or cancelled task a fresh start: pending, due now,
// Attempt 0, error, result and cancellation cleared. A task a retention
// purge has marked (Purging) refuses with ErrPurging.
func (t *Task) Replay(now time.Time) error {
	if !t.Purging.IsZero() {
		return t.refuse("replay", ErrPurging, time.Time{}, "a retention purge is deleting it; resubmit the work")
	}
	if t.Corrupt != "" {
		return t.refuse("replay", ErrInvalidTransition, time.Time{}, "the task object was corrupt; resubmit the work")
	}
	if t.Status != Failed && t.Status != Cancelled {
		return t.refuse("replay", ErrInvalidTransition, time.Time{}, "only failed or cancelled tasks can be replayed")
	}
	was := t.Status
	t.Status = Pending
	t.Attempt = 0
	t.Error = ""
	t.Result = nil
	t.CancelRequested = false
	t.Claim = nil
	t.AvailableAt = ceilMilli(now)
	t.record(now, EventReplayed, "", "replayed (was "+string(was)+")")
	return nil
}

// MarkCorrupt fails a task returned by Store.Load with ErrCorrupt, keeping
// the raw body in Corrupt, so that writing it (Store.Write with the etag
// Load returned) replaces the unusable object with a failed, inspectable
// one instead of leaving it to be retried forever. cause, normally Load's
// *CorruptError, becomes the task's Error.
func (t *Task) MarkCorrupt(now time.Time, cause error) error {
	if t.Corrupt == "" {
		return t.refuse("mark corrupt", ErrInvalidTransition, time.Time{}, "the task is not corrupt")
	}
	msg := "corrupt task object"
	if cause != nil {
		msg = cause.Error()
	}
	t.Status = Failed
	t.Error = truncate(msg, maxErrorLen)
	t.record(now, EventCorrupt, "", msg)
	return nil
}

// MarkPurging claims a finished task for deletion by a retention purge:
// Purging = now and a history entry. Written with Store.Write (If-Match on
// the ETag read), it makes the version the purge then deletes one that
// nothing changes any more: Replay refuses it. A task already marked is
// left as it is; one not finished refuses with ErrInvalidTransition.
func (t *Task) MarkPurging(now time.Time) error {
	if !t.Status.IsTerminal() {
		return t.refuse("mark purging", ErrInvalidTransition, time.Time{}, "only a finished task can be purged")
	}
	if t.Purging.IsZero() {
		t.Purging = now.UTC()
		t.record(now, EventPurging, "", "being deleted: finished before the retention cutoff")
	}
	return nil
}

func (t *Task) mustRun(op string) error {
	if t.Status.IsTerminal() {
		return t.refuse(op, ErrTerminal, time.Time{}, "")
	}
	if t.Status != Running || t.Claim == nil {
		return t.refuse(op, ErrInvalidTransition, time.Time{}, "the task is not running")
	}
	return nil
}

func (t *Task) refuse(op string, err error, due time.Time, detail string) *TransitionError {
	return &TransitionError{Op: op, Ref: t.Ref(), Status: t.Status, Due: due, Err: err, Detail: detail}
}

// record appends a transition and trims the history.
func (t *Task) record(now time.Time, event, runner, detail string) {
	t.History = append(t.History, Transition{At: now.UTC(), Event: event, Runner: runner,
		Attempt: t.Attempt, Detail: truncate(detail, maxDetailLen)})
	t.trimHistory(t.historyLimit())
}

func (t *Task) historyLimit() int {
	if t.histLimit < 1 {
		return DefaultHistoryLimit
	}
	return t.histLimit
}

// trimHistory keeps the newest limit transitions in a new slice, so that a
// shallow copy of the task keeps its own history intact.
func (t *Task) trimHistory(limit int) {
	if n := len(t.History) - limit; n > 0 {
		t.History = append([]Transition(nil), t.History[n:]...)
		t.HistoryDropped += n
	}
}

// ceilMilli rounds up to the millisecond: pointer keys have millisecond
// precision and must never read due before the task is.
func ceilMilli(t time.Time) time.Time {
	t = t.UTC()
	if tr := t.Truncate(time.Millisecond); !tr.Equal(t) {
		return tr.Add(time.Millisecond)
	}
	return t
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut
// with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := max(n-len("…"), 0)
	for i > 0 && !utf8RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

package tenuretest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

// Reminder is a pending reminder of an entity, as Unit.Reminders lists it.
type Reminder struct {
	Name  string          // the reminder's name
	Due   time.Time       // when it fires, on the Unit's clock
	Op    string          // the operation it runs ("" for the default)
	Input json.RawMessage // its input as JSON, nil for none
}

// pending is a reminder not fired yet.
type pending struct {
	Reminder
	key entKey
	seq uint64 // scheduling order, for reminders due at the same time
}

// maxFires bounds the reminders one Advance fires: a reminder that
// re-arms itself with no delay would otherwise fire forever.
const maxFires = 100_000

// remindAfter is Context.RemindAfter for the entity k: the reminder is
// recorded at once (on a runner it is a task submitted at once, which a
// failing operation does not take back), replacing the pending one of the
// same name.
func (u *Unit) remindAfter(k entKey, name string, d time.Duration, op string, input any) error {
	if err := task.ValidateOp(op); err != nil {
		return fmt.Errorf("tenuretest: reminder %q of %s: %w", name, k, err)
	}
	if err := entity.ValidateReminderName(name); err != nil {
		return err
	}
	if d := u.types[k.typ]; d != nil && !d.HasOp(op) {
		return &entity.UnknownOpError{Type: d.Name(), Op: op, Ops: d.Ops()}
	}
	raw, err := encode(input)
	if err != nil {
		return fmt.Errorf("tenuretest: reminder %q of %s: input does not encode as JSON: %w", name, k, err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	// A runner reads the clock anew and keeps milliseconds (the task id
	// holds them); a due time in the past is now.
	due := u.now.Add(max(d, 0)).Truncate(time.Millisecond)
	u.dropReminders(k, name)
	u.remSeq++
	u.rems = append(u.rems, &pending{Reminder: Reminder{Name: name, Due: due, Op: op, Input: raw}, key: k, seq: u.remSeq})
	return nil
}

// cancelReminder is Context.CancelReminder for the entity k.
func (u *Unit) cancelReminder(k entKey, name string) error {
	if err := entity.ValidateReminderName(name); err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.dropReminders(k, name)
	return nil
}

// dropReminders removes k's pending reminders called name; u.mu is held.
func (u *Unit) dropReminders(k entKey, name string) {
	u.rems = slices.DeleteFunc(u.rems, func(p *pending) bool { return p.key == k && p.Name == name })
}

// Reminders lists the entity's pending reminders, the soonest due first.
func (u *Unit) Reminders(typ, id string) []Reminder {
	u.mu.Lock()
	defer u.mu.Unlock()
	var ps []*pending
	for _, p := range u.rems {
		if p.key == (entKey{typ, id}) {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, byDue)
	out := make([]Reminder, len(ps))
	for i, p := range ps {
		out[i] = p.Reminder
		out[i].Input = slices.Clone(p.Input)
	}
	return out
}

func byDue(a, b *pending) int {
	if c := a.Due.Compare(b.Due); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// Advance moves the clock d forward, firing the reminders that fall due
// on the way (those that fired reminders schedule too), the soonest first
// and those due together in the order they were scheduled. Each runs its
// operation as a task, with the clock at its due time, and is gone once
// it ran; Context.Reminder names it. Advance(0) fires the reminders due
// now. A reminder whose operation fails is not retried (a runner would
// retry it as a task): Advance returns the errors of those that failed,
// each naming its reminder, after firing the others.
func (u *Unit) Advance(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("tenuretest: Advance(%s): the clock does not go back", d)
	}
	u.mu.Lock()
	target := u.now.Add(d)
	u.mu.Unlock()
	var errs []error
	for fired := 0; ; fired++ {
		u.mu.Lock()
		var next *pending
		for _, p := range u.rems {
			if !p.Due.After(target) && (next == nil || byDue(p, next) < 0) {
				next = p
			}
		}
		if next == nil {
			u.now = target
			u.mu.Unlock()
			return errors.Join(errs...)
		}
		if fired == maxFires {
			u.mu.Unlock()
			return errors.Join(append(errs, fmt.Errorf("tenuretest: Advance(%s): %d reminders fired and more are due: a reminder re-arms itself without delay?", d, maxFires))...)
		}
		u.rems = slices.DeleteFunc(u.rems, func(p *pending) bool { return p == next })
		if next.Due.After(u.now) {
			u.now = next.Due
		}
		u.mu.Unlock()
		if _, err := u.run(context.Background(), nil, next.key, next.Op, next.Input, next.Name); err != nil {
			errs = append(errs, fmt.Errorf("tenuretest: reminder %q of %s (op %q, due %s): %w", next.Name, next.key, next.Op, next.Due.Format(time.RFC3339Nano), err))
		}
		u.flush()
	}
}

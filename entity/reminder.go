package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// Reminders: a reminder is a durable message an entity schedules to
// itself, a delayed task of the entity's own type and id whose id is
// derived from (entity, due time, name):
//
//	rem-<entity key>-<due, Unix milliseconds, 13 digits>-<name>
//
// So it is fenced, retried, taken over and completed once like any task
// (it survives failover and fires once), it runs in the
// entity's mailbox, and registering the same reminder at the same time
// twice (a handler run again after a crash) makes one task; RemindAfter
// reads the clock anew, and the replacement by name leaves one pending. It reaches the entity's Handle
// with the input given to Remind; ReminderFrom tells it apart.
//
// Cost: Remind is one task submission (2 PUTs and a wake-up) plus one
// LIST of the shard's ready pointers (per 1000 pending tasks), which finds
// the reminders of the same name to replace; CancelReminder is that LIST
// plus one cancel per reminder found.

// ErrNoReminders is returned by Remind and CancelReminder outside an
// entity's handler (a task, call or send of an entity with an id), or on a
// host without a task client (WithTaskClient).
var ErrNoReminders = errors.New("entity: reminders need an entity's handler context on a host with a task client")

// ErrBadReminderName is wrapped by the error of a reminder name that is
// empty, longer than MaxReminderName or not of [A-Za-z0-9_:-].
var ErrBadReminderName = errors.New("entity: bad reminder name")

// MaxReminderName is the longest reminder name, in bytes.
const MaxReminderName = 128

var reminderName = regexp.MustCompile(`^[A-Za-z0-9_:-]{1,128}$`)

// ValidateReminderName checks a reminder name: 1 to MaxReminderName bytes
// of [A-Za-z0-9_:-]. Its error wraps ErrBadReminderName.
func ValidateReminderName(name string) error {
	if !reminderName.MatchString(name) {
		return fmt.Errorf("%w: %q must match %s", ErrBadReminderName, name, reminderName)
	}
	return nil
}

const reminderPrefix = "rem-"

// selfKey is the context key of the entity a handler runs for.
type selfKey struct{}

// self is the entity a handler runs for: reminders are addressed to it.
type self struct {
	e        *shardRef
	typ, id  string
	taskID   string // the running task's id, "" for a message
	reminder string // the reminder's name when the task is one
}

func selfFrom(ctx context.Context) (*self, error) {
	s, ok := ctx.Value(selfKey{}).(*self)
	if !ok || s == nil {
		return nil, fmt.Errorf("%w: not in an entity's handler", ErrNoReminders)
	}
	if s.e.h.taskClient == nil {
		return nil, fmt.Errorf("%w: the host of %s/%s has no task client", ErrNoReminders, s.typ, s.id)
	}
	return s, nil
}

// ReminderFrom returns the name of the reminder a handler's context runs,
// if it runs one.
func ReminderFrom(ctx context.Context) (name string, ok bool) {
	s, _ := ctx.Value(selfKey{}).(*self)
	if s == nil || s.reminder == "" {
		return "", false
	}
	return s.reminder, true
}

// RemindAfter is Remind at d from now (S3 time).
func RemindAfter(ctx context.Context, name string, d time.Duration, input any) error {
	return remindAfter(ctx, name, d, "", input)
}

// remindAfter is RemindAfter of the operation op.
func remindAfter(ctx context.Context, name string, d time.Duration, op string, input any) error {
	s, err := selfFrom(ctx)
	if err != nil {
		return err
	}
	now, err := s.e.h.tasks.Now(ctx)
	if err != nil {
		return fmt.Errorf("entity: reminder %q of %s/%s: reading the S3 clock: %w", name, s.typ, s.id, err)
	}
	return remind(ctx, name, now.Now.Add(d), op, input)
}

// Remind schedules the reminder name of the handler's entity at the S3
// time at (a time in the past means now): a task of the entity's type and
// id whose input is input encoded as JSON (nil: none), delivered to its
// Handle once (ReminderFrom names it). A pending reminder of the same name
// is replaced, except the one running now (a handler re-arming its own
// reminder). Remind fails with ErrNoReminders outside an entity's handler.
func Remind(ctx context.Context, name string, at time.Time, input any) error {
	return remind(ctx, name, at, "", input)
}

// remind is Remind of the operation op (of a type made by Define; "" for
// its default, or for a type without operations).
func remind(ctx context.Context, name string, at time.Time, op string, input any) error {
	if err := task.ValidateOp(op); err != nil {
		return fmt.Errorf("entity: reminder %q: %w", name, err)
	}
	if !reminderName.MatchString(name) {
		return fmt.Errorf("%w: %q must match %s", ErrBadReminderName, name, reminderName)
	}
	s, err := selfFrom(ctx)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if input != nil {
		if raw, err = json.Marshal(input); err != nil {
			return fmt.Errorf("entity: reminder %q of %s/%s: input does not encode as JSON: %w", name, s.typ, s.id, err)
		}
	}
	at = at.Truncate(time.Millisecond)
	id := reminderID(s.typ, s.id, name, at)
	c := s.e.h.taskClient
	t, created, err := c.Submit(ctx, task.SubmitRequest{ID: id, Type: s.typ, Entity: s.id, Op: op, Input: raw, AvailableAt: at})
	if err != nil {
		return fmt.Errorf("entity: reminder %q of %s/%s: %w", name, s.typ, s.id, err)
	}
	if t.Shard != s.e.own.Shard {
		// The task client's placement disagrees with the shard this entity
		// runs on: the host was given another cluster's or group's client.
		return fmt.Errorf("%w: reminder %q of %s/%s went to shard %s, the entity is on %s",
			ErrInvalidConfig, name, s.typ, s.id, t.Shard, s.e.own.Shard)
	}
	if created {
		s.e.h.rmetrics.events[reminderScheduled].Inc()
	}
	_, err = s.cancelReminders(ctx, name, id)
	return err
}

// CancelReminder cancels the pending reminders called name of the
// handler's entity (not the one running now). Cancelling a reminder that
// does not exist is not an error.
func CancelReminder(ctx context.Context, name string) error {
	if !reminderName.MatchString(name) {
		return fmt.Errorf("%w: %q must match %s", ErrBadReminderName, name, reminderName)
	}
	s, err := selfFrom(ctx)
	if err != nil {
		return err
	}
	_, err = s.cancelReminders(ctx, name, "")
	return err
}

// cancelReminders cancels the reminders called name of s's entity that
// have a ready pointer (pending or running), except keep and the running
// task; it returns how many it cancelled.
func (s *self) cancelReminders(ctx context.Context, name, keep string) (int, error) {
	prefix := reminderPrefix + task.EntityKey(s.typ, s.id) + "-"
	store := s.e.h.tasks
	shard := s.e.own.Shard
	n := 0
	after := ""
	for {
		ptrs, more, err := store.ListPointers(ctx, shard, after, storage.MaxListLimit)
		if err != nil {
			return n, fmt.Errorf("entity: reminder %q of %s/%s: listing shard %s: %w", name, s.typ, s.id, shard, err)
		}
		for _, p := range ptrs {
			after = p.Key
			if p.ID == keep || p.ID == s.taskID || !strings.HasPrefix(p.ID, prefix) {
				continue
			}
			if got, ok := parseReminderID(p.ID, s.typ, s.id); !ok || got != name {
				continue
			}
			if _, err := s.e.h.taskClient.Cancel(ctx, p.Ref()); err != nil && !errors.Is(err, task.ErrNotFound) {
				return n, fmt.Errorf("entity: reminder %q of %s/%s: cancelling %s: %w", name, s.typ, s.id, p.Ref(), err)
			}
			n++
		}
		if !more || len(ptrs) == 0 {
			s.e.h.rmetrics.events[reminderCancelled].Add(float64(n))
			return n, nil
		}
	}
}

// reminderID is the task id of the reminder name of (typ, id) due at.
func reminderID(typ, id, name string, at time.Time) string {
	return fmt.Sprintf("%s%s-%013d-%s", reminderPrefix, task.EntityKey(typ, id), max(at.UnixMilli(), 0), name)
}

// parseReminderID returns the name of the reminder of (typ, id) whose task
// id is tid.
func parseReminderID(tid, typ, id string) (string, bool) {
	rest, ok := strings.CutPrefix(tid, reminderPrefix)
	if !ok || id == "" {
		return "", false
	}
	ekey, rest, ok := strings.Cut(rest, "-")
	if !ok || ekey != task.EntityKey(typ, id) {
		return "", false
	}
	ms, name, ok := strings.Cut(rest, "-")
	if !ok || len(ms) != 13 || !reminderName.MatchString(name) {
		return "", false
	}
	if _, err := strconv.ParseInt(ms, 10, 64); err != nil {
		return "", false
	}
	return name, true
}

// Reminder events, the values of the event label.
const (
	reminderScheduled = "scheduled"
	reminderFired     = "fired"
	reminderCancelled = "cancelled"
)

// reminderMetrics count reminder events.
type reminderMetrics struct {
	events map[string]prometheus.Counter
}

func newReminderMetrics(reg prometheus.Registerer) *reminderMetrics {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tenure", Subsystem: "entity", Name: "reminders_total",
		Help: "Entity reminders by event: scheduled (a new reminder task), fired (its handler started), cancelled (replaced or cancelled)."},
		[]string{"event"})
	reg.MustRegister(v)
	m := &reminderMetrics{events: map[string]prometheus.Counter{}}
	for _, ev := range []string{reminderScheduled, reminderFired, reminderCancelled} {
		m.events[ev] = v.WithLabelValues(ev)
	}
	return m
}

// withSelf returns ctx naming the entity (typ, id) and the task taskID
// ("" for a message) a handler of e runs.
func (r *shardRef) withSelf(ctx context.Context, typ, id, taskID string) context.Context {
	if id == "" {
		return ctx
	}
	s := r.self(typ, id, taskID)
	if s.reminder != "" {
		r.h.rmetrics.events[reminderFired].Inc()
	}
	return context.WithValue(ctx, selfKey{}, s)
}

func (r *shardRef) self(typ, id, taskID string) *self {
	s := &self{e: r, typ: typ, id: id, taskID: taskID}
	if name, ok := parseReminderID(taskID, typ, id); ok {
		s.reminder = name
	}
	return s
}

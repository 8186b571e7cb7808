package entity

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// alarmOp is the input of the "alarm" entity: arm or cancel a reminder.
type alarmOp struct {
	Op      string `json:"op"` // arm, cancel
	Name    string `json:"name"`
	AfterMS int    `json:"after_ms"`
	Msg     string `json:"msg"`
}

// rings records the reminders delivered to alarms, as the handlers saw
// them.
type rings struct {
	mu  sync.Mutex
	got []ring
}

type ring struct {
	runner, entity, name, msg, task string
}

func (r *rings) add(g ring) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, g)
}

func (r *rings) all() []ring {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ring(nil), r.got...)
}

// alarmEnv starts an env whose hosts have a task client and the "alarm"
// entity.
func alarmEnv(t *testing.T) (*env, *rings, registerFunc) {
	e := newEnv(t, 4)
	e.hostOpts = func(*node) []Option { return []Option{WithTaskClient(e.client)} }
	rr := &rings{}
	reg := func(n *node, h *Host) {
		if err := h.RegisterFunc("alarm", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			if name, ok := ReminderFrom(ctx); ok {
				var in struct{ Msg string }
				_ = json.Unmarshal(tk.Input, &in)
				rr.add(ring{runner: n.id, entity: tk.Entity, name: name, msg: in.Msg, task: tk.ID})
				return nil, nil
			}
			var op alarmOp
			if err := json.Unmarshal(tk.Input, &op); err != nil {
				return nil, Permanent(err)
			}
			switch op.Op {
			case "arm":
				return nil, RemindAfter(ctx, op.Name, time.Duration(op.AfterMS)*time.Millisecond, map[string]string{"msg": op.Msg})
			case "cancel":
				return nil, CancelReminder(ctx, op.Name)
			}
			return nil, Permanent(errors.New("unknown op"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	return e, rr, reg
}

func (e *env) alarm(id string, op alarmOp) *task.Task {
	e.t.Helper()
	b, _ := json.Marshal(op)
	tk := e.submit(task.SubmitRequest{Type: "alarm", Entity: id, Input: b})
	if got := e.final(tk.Ref(), 30*time.Second); got.Status != task.Completed {
		e.t.Fatalf("%s %+v: %s %s", id, op, got.Status, got.Error)
	}
	return tk
}

// reminderTasks lists the reminder tasks of alarm id, by status.
func (e *env) reminderTasks(id string) map[task.Status][]*task.Task {
	e.t.Helper()
	shard := task.ShardOf(storage.DefaultGroup, e.Meta.Shards, "alarm", id, "")
	list, _, err := e.client.List(ctxFor(e.t, 30*time.Second), task.ListOptions{Shard: &shard, Type: "alarm"})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[task.Status][]*task.Task{}
	for _, tk := range list {
		if tk.Entity == id && strings.HasPrefix(tk.ID, reminderPrefix) {
			out[tk.Status] = append(out[tk.Status], tk)
		}
	}
	return out
}

// TestReminderFiresOnceAndReplaces: a reminder set by a task reaches its
// entity once, named; setting it again before it fires replaces it;
// cancelling it leaves nothing to fire.
func TestReminderFiresOnceAndReplaces(t *testing.T) {
	e, rr, reg := alarmEnv(t)
	e.start("r1", reg)
	e.waitOwned(20 * time.Second)

	e.alarm("a1", alarmOp{Op: "arm", Name: "wake", AfterMS: 200, Msg: "hello"})
	testenv.WaitFor(t, "the reminder delivered", 20*time.Second, func() bool { return len(rr.all()) == 1 })
	testenv.WaitFor(t, "the reminder task completed", 20*time.Second, func() bool {
		return len(e.reminderTasks("a1")[task.Completed]) == 1
	})
	if g := rr.all()[0]; g.entity != "a1" || g.name != "wake" || g.msg != "hello" {
		t.Fatalf("delivered %+v", g)
	}

	// Replace: armed far, then near; only the near one fires.
	e.alarm("a2", alarmOp{Op: "arm", Name: "wake", AfterMS: 60_000, Msg: "far"})
	e.alarm("a2", alarmOp{Op: "arm", Name: "wake", AfterMS: 200, Msg: "near"})
	testenv.WaitFor(t, "the replacing reminder delivered", 20*time.Second, func() bool { return len(rr.all()) == 2 })
	testenv.WaitFor(t, "a2's reminders settled", 20*time.Second, func() bool {
		st := e.reminderTasks("a2")
		return len(st[task.Completed]) == 1 && len(st[task.Cancelled]) == 1 && len(st[task.Pending]) == 0
	})
	if g := rr.all()[1]; g.entity != "a2" || g.msg != "near" {
		t.Fatalf("delivered %+v, want a2's near reminder", g)
	}

	// Cancel.
	e.alarm("a3", alarmOp{Op: "arm", Name: "wake", AfterMS: 60_000, Msg: "never"})
	e.alarm("a3", alarmOp{Op: "cancel", Name: "wake"})
	if st := e.reminderTasks("a3"); len(st[task.Cancelled]) != 1 || len(st[task.Pending]) != 0 {
		t.Fatalf("a3's reminders after cancel: %v", st)
	}
	if got := len(rr.all()); got != 2 {
		t.Fatalf("%d reminders delivered, want 2", got)
	}
}

// TestReminderSurvivesFailover: a reminder whose entity's runner crashes
// before it is due fires once, on the successor.
func TestReminderSurvivesFailover(t *testing.T) {
	e, rr, reg := alarmEnv(t)
	e.start("r1", reg)
	e.start("r2", reg)
	e.waitSettled(30 * time.Second)
	shard := task.ShardOf(storage.DefaultGroup, e.Meta.Shards, "alarm", "f1", "")
	var holder *node
	for _, n := range e.members() {
		for _, o := range n.mgr.Owned() {
			if o.Shard == shard {
				holder = n
			}
		}
	}
	if holder == nil {
		t.Fatal("nobody holds the alarm's shard")
	}
	e.alarm("f1", alarmOp{Op: "arm", Name: "later", AfterMS: 1500, Msg: "survived"})
	holder.kill()
	testenv.WaitFor(t, "the reminder delivered after the crash", 30*time.Second, func() bool { return len(rr.all()) == 1 })
	testenv.WaitFor(t, "the reminder task completed", 20*time.Second, func() bool {
		return len(e.reminderTasks("f1")[task.Completed]) == 1
	})
	if g := rr.all(); len(g) != 1 || g[0].runner == holder.id || g[0].msg != "survived" {
		t.Fatalf("delivered %+v, want once on the successor of %s", g, holder.id)
	}
}

// TestReminderFromCall: a call can set its entity's reminder too.
func TestReminderFromCall(t *testing.T) {
	e, rr, reg := alarmEnv(t)
	n := e.start("r1", reg)
	e.waitOwned(20 * time.Second)
	body, _ := json.Marshal(alarmOp{Op: "arm", Name: "ping", AfterMS: 100, Msg: "from a call"})
	d := Delivery{Message: Message{Type: "alarm", ID: "c1", Body: body},
		Shard: task.ShardOf(storage.DefaultGroup, e.Meta.Shards, "alarm", "c1", "")}
	if _, err := n.host.Deliver(ctxFor(t, 30*time.Second), d); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the reminder delivered", 20*time.Second, func() bool { return len(rr.all()) == 1 })
	if g := rr.all()[0]; g.entity != "c1" || g.name != "ping" {
		t.Fatalf("delivered %+v", g)
	}
}

// TestReminderErrors: outside a handler, with a bad name, or on a host
// without a task client, Remind fails clearly.
func TestReminderErrors(t *testing.T) {
	ctx := context.Background()
	if err := Remind(ctx, "x", time.Now(), nil); !errors.Is(err, ErrNoReminders) {
		t.Fatalf("outside a handler: %v", err)
	}
	if err := CancelReminder(ctx, "x"); !errors.Is(err, ErrNoReminders) {
		t.Fatalf("cancel outside a handler: %v", err)
	}
	for _, name := range []string{"", "has space", strings.Repeat("a", MaxReminderName+1)} {
		if err := Remind(ctx, name, time.Now(), nil); !errors.Is(err, ErrBadReminderName) {
			t.Fatalf("name %q: %v", name, err)
		}
	}
	if _, ok := ReminderFrom(ctx); ok {
		t.Fatal("ReminderFrom outside a reminder")
	}
	id := reminderID("alarm", "e1", "wake", time.UnixMilli(1700000000123))
	if name, ok := parseReminderID(id, "alarm", "e1"); !ok || name != "wake" {
		t.Fatalf("parse %q: %q %v", id, name, ok)
	}
	if _, ok := parseReminderID(id, "alarm", "e2"); ok {
		t.Fatalf("%q parsed as e2's", id)
	}
	if err := task.ValidateID(reminderID("t", "e", strings.Repeat("n", MaxReminderName), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))); err != nil {
		t.Fatalf("longest reminder id: %v", err)
	}

	// A host without a task client.
	e := newEnv(t, 2)
	var got error
	done := make(chan struct{})
	e.start("r1", func(_ *node, h *Host) {
		if err := h.RegisterFunc("alarm", func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
			got = Remind(ctx, "x", time.Now(), nil)
			close(done)
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitOwned(20 * time.Second)
	e.submit(task.SubmitRequest{Type: "alarm", Entity: "e1"})
	select {
	case <-done:
	case <-ctxFor(t, 30*time.Second).Done():
		t.Fatal("handler did not run")
	}
	if !errors.Is(got, ErrNoReminders) {
		t.Fatalf("without a task client: %v", got)
	}
}

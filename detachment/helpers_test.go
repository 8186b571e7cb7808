package detachment

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests use a 9s lease: DetachMargin 3s, RecoverWindow 2s, threshold 2,
// StorageErrorGrace 1s.
const ttl = 9 * time.Second

var (
	errKA      = errors.New("keep-alive: deadline exceeded")
	errStorage = errors.New("storage: unavailable")
)

func newMachine(t *testing.T, cfg Config, opts ...Option) *Machine {
	t.Helper()
	m, err := New(cfg, ttl, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func modeConfig(mode Mode) Config {
	c := DefaultConfig(ttl)
	c.Mode = mode
	return c
}

// recorder subscribes to a machine and keeps what it was told.
type recorder struct {
	mu sync.Mutex
	ts []Transition
}

func record(m *Machine) *recorder {
	r := &recorder{}
	m.Subscribe(func(tr Transition) {
		r.mu.Lock()
		r.ts = append(r.ts, tr)
		r.mu.Unlock()
	})
	return r
}

func (r *recorder) all() []Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Transition(nil), r.ts...)
}

func (r *recorder) last(t *testing.T) Transition {
	t.Helper()
	ts := r.all()
	if len(ts) == 0 {
		t.Fatal("no transition recorded")
	}
	return ts[len(ts)-1]
}

// kinds renders the recorded transitions as "attached detached:reason …".
func (r *recorder) kinds() string {
	var b []string
	for _, tr := range r.all() {
		s := tr.Kind.String()
		if tr.Kind == Detached || tr.Kind == WouldDetach {
			s += ":" + string(tr.Reason)
		}
		b = append(b, s)
	}
	return strings.Join(b, " ")
}

func wantKinds(t *testing.T, r *recorder, want string) {
	t.Helper()
	if got := r.kinds(); got != want {
		t.Fatalf("transitions:\n got %q\nwant %q", got, want)
	}
}

// wantAttached checks the attachment and its context agree with attached.
func wantAttached(t *testing.T, m *Machine, attached bool) {
	t.Helper()
	ctx, gen, got := m.Attachment()
	s := m.State()
	if got != attached || s.Attached != attached {
		t.Fatalf("attached = %v (state %v), want %v; state %+v", got, s.Attached, attached, s)
	}
	if attached && ctx.Err() != nil {
		t.Fatalf("attached but generation %d context is cancelled: %v", gen, context.Cause(ctx))
	}
	if !attached && ctx.Err() == nil {
		t.Fatalf("detached but generation %d context is live", gen)
	}
}

// wantDetached checks the runner is detached for reason and that the
// attachment context's cause says so.
func wantDetached(t *testing.T, m *Machine, reason Reason) {
	t.Helper()
	wantAttached(t, m, false)
	if s := m.State(); s.Reason != reason {
		t.Fatalf("reason = %q, want %q", s.Reason, reason)
	}
	ctx, _, _ := m.Attachment()
	cause := context.Cause(ctx)
	var de *DetachedError
	if !errors.As(cause, &de) || !errors.Is(cause, ErrDetached) {
		t.Fatalf("cause = %v, want a *DetachedError", cause)
	}
	if reason != ReasonStopped && de.Reason != reason {
		t.Fatalf("cause reason = %q, want %q (%v)", de.Reason, reason, cause)
	}
	if !strings.Contains(cause.Error(), string(de.Reason)) {
		t.Fatalf("cause %q does not name the reason %q", cause, de.Reason)
	}
}

// attachNow gives a fresh keep-alive to a starting machine and checks it
// attaches at once.
func attachNow(t *testing.T, m *Machine, lease int64) {
	t.Helper()
	m.KeepAliveOK(lease, m.clock.Now(), ttl)
	wantAttached(t, m, true)
}

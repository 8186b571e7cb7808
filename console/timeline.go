package console

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// EventKind is the kind of a timeline Event.
type EventKind string

// The kinds of timeline events a runner records.
const (
	// EventAttached: the runner attached (Reason: the detachment it ends).
	EventAttached EventKind = "attached"
	// EventDetached: the runner detached; its shards' work stopped.
	EventDetached EventKind = "detached"
	// EventWouldDetach, EventWouldAttach: observe mode's decisions, which
	// interrupt nothing.
	EventWouldDetach EventKind = "would_detach"
	EventWouldAttach EventKind = "would_attach"
	// EventKeepAliveFailed: a lease keep-alive failed after a good one.
	EventKeepAliveFailed EventKind = "keepalive_failed"
	// EventKeepAliveRecovered: a keep-alive succeeded after failures.
	EventKeepAliveRecovered EventKind = "keepalive_recovered"
	// EventLeaseLost: etcd said the lease was gone; the runner registers
	// again.
	EventLeaseLost EventKind = "lease_lost"
	// EventStorageError: etcd failed for longer than the storage error
	// grace (the cause of the detachment or observe decision that follows).
	EventStorageError EventKind = "storage_error"
	// EventModeChanged: the dynamic config changed the detachment mode.
	EventModeChanged EventKind = "mode_changed"
	// EventDraining: a drain started (POST /admin/drain, the console, a
	// graceful stop).
	EventDraining EventKind = "draining"
	// EventStarted: the runner registered and serves.
	EventStarted EventKind = "started"
	// EventStopped: the runner began its stop.
	EventStopped EventKind = "stopped"
)

// Event is one thing that happened to a runner.
type Event struct {
	At     time.Time `json:"at"`
	Runner string    `json:"runner"`
	Kind   EventKind `json:"kind"`
	// Reason is the detachment reason of the attachment kinds (e.g.
	// lease-deadline), empty for the others.
	Reason string `json:"reason"`
	// Detail says more: the error, the new mode, the streak.
	Detail string `json:"detail"`
	// Generation is the attachment generation of the attachment kinds.
	Generation uint64 `json:"generation"`
}

// TimelineSize is how many events a runner keeps.
const TimelineSize = 500

// Timeline is a runner's recent events: a ring of the last size, safe for
// concurrent use, with no I/O (Add may run on the paths it records: the
// detachment machine's delivery, the keep-alive loop).
type Timeline struct {
	runner string
	now    func() time.Time

	mu   sync.Mutex
	ring []Event
	next int // where the next event goes once the ring is full
}

// NewTimeline returns the timeline of runner, keeping size events
// (≤ 0: TimelineSize).
func NewTimeline(runner string, size int) *Timeline {
	if size <= 0 {
		size = TimelineSize
	}
	return &Timeline{runner: runner, now: time.Now, ring: make([]Event, 0, size)}
}

// Add records e, with the timeline's runner and, when e.At is zero, the
// time now.
func (t *Timeline) Add(e Event) {
	e.Runner = t.runner
	if e.At.IsZero() {
		e.At = t.now()
	}
	e.At = e.At.UTC()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ring) < cap(t.ring) {
		t.ring = append(t.ring, e)
		return
	}
	t.ring[t.next] = e
	t.next = (t.next + 1) % len(t.ring)
}

// Since returns the events at or after since (all for the zero time),
// oldest first.
func (t *Timeline) Since(since time.Time) []Event {
	t.mu.Lock()
	all := make([]Event, 0, len(t.ring))
	all = append(all, t.ring[t.next:]...)
	all = append(all, t.ring[:t.next]...)
	t.mu.Unlock()
	out := all[:0]
	for _, e := range all {
		if !e.At.Before(since) {
			out = append(out, e)
		}
	}
	// Events are added as they happen, but not necessarily in the order
	// of their times (two goroutines): sort, stably.
	slices.SortStableFunc(out, func(a, b Event) int { return a.At.Compare(b.At) })
	return out
}

// TimelineReply is GET /debug/timeline.
type TimelineReply struct {
	Runner string  `json:"runner"`
	Events []Event `json:"events"`
}

// TimelineHandler serves GET /debug/timeline[?since=RFC3339]: the
// timeline's events since (all without it).
func TimelineHandler(t *Timeline) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		since, err := parseSince(r, time.Time{})
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, TimelineReply{Runner: t.runner, Events: t.Since(since)})
	})
}

// parseSince reads the since parameter: RFC 3339; def when absent.
func parseSince(r *http.Request, def time.Time) (time.Time, error) {
	s := r.URL.Query().Get("since")
	if s == "" {
		return def, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badRequest("since", "%q is not an RFC 3339 time (e.g. 2025-01-02T15:04:05Z)", s)
	}
	return t, nil
}

// DefaultTimelineWindow is how far back GET timeline goes without since.
const DefaultTimelineWindow = 15 * time.Minute

// timelineView is GET timeline.
type timelineView struct {
	Events      []Event           `json:"events"`
	Runners     []timelineRunner  `json:"runners"`
	GeneratedAt string            `json:"generated_at"`
	Since       string            `json:"since"`
	Kinds       map[EventKind]int `json:"kinds"` // events per kind in the answer
}

type timelineRunner struct {
	ID        string `json:"id"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error"`
	// Registered: the runner is registered in etcd now. One that is not
	// was seen registered within the window (its lease ended: cut off
	// from etcd, or stopped) and is still asked for its events.
	Registered bool `json:"registered"`
}

// seenRunners remembers the runners the timeline found registered, and
// when last, so that one whose registration ended is still asked for its
// events while the window reaches back to it. Entries older than an hour
// are forgotten.
type seenRunners struct {
	mu sync.Mutex
	m  map[string]seenRunner
}

type seenRunner struct {
	info storage.RunnerInfo
	last time.Time
}

// seenForget is how long a runner no longer registered is remembered.
const seenForget = time.Hour

// update records registered as seen at now and returns the runners seen
// registered since since that are not among them.
func (s *seenRunners) update(registered []storage.RunnerInfo, now, since time.Time) []storage.RunnerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]seenRunner{}
	}
	live := make(map[string]bool, len(registered))
	for _, rn := range registered {
		live[rn.ID] = true
		s.m[rn.ID] = seenRunner{info: rn, last: now}
	}
	var gone []storage.RunnerInfo
	for id, sr := range s.m {
		switch {
		case live[id]:
		case now.Sub(sr.last) > seenForget:
			delete(s.m, id)
		case !sr.last.Before(since):
			gone = append(gone, sr.info)
		}
	}
	return gone
}

// timeline merges every live runner's events on one time axis.
func (a *API) timeline(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	now := a.d.Now()
	since, err := parseSince(r, now.Add(-DefaultTimelineWindow))
	if err != nil {
		return err
	}
	runners, _, err := a.d.Store.Runners(ctx)
	if err != nil && len(runners) == 0 {
		return unavailable("listing the runners in etcd", err)
	}
	registered := make(map[string]bool, len(runners))
	for _, rn := range runners {
		registered[rn.ID] = true
	}
	// A runner cut off from etcd loses its registration when its lease
	// ends, but still answers on its admin address: its detach is the
	// picture a timeline is for. So the runners seen registered within
	// the window are asked too.
	runners = append(runners, a.seen.update(runners, now, since)...)
	sortRunners(runners)
	evs := make([][]Event, len(runners))
	errs := make([]error, len(runners))
	var wg sync.WaitGroup
	for i, rn := range runners {
		wg.Go(func() { evs[i], errs[i] = a.d.Peers.Timeline(ctx, rn, since) })
	}
	wg.Wait()
	v := timelineView{Events: []Event{}, Runners: []timelineRunner{}, GeneratedAt: utc(now), Since: utc(since), Kinds: map[EventKind]int{}}
	for i, rn := range runners {
		tr := timelineRunner{ID: rn.ID, Reachable: errs[i] == nil, Registered: registered[rn.ID]}
		if errs[i] != nil {
			tr.Error = errs[i].Error()
		}
		v.Runners = append(v.Runners, tr)
		for _, e := range evs[i] {
			if e.At.Before(since) {
				continue
			}
			e.Runner = rn.ID
			v.Events = append(v.Events, e)
			v.Kinds[e.Kind]++
		}
	}
	slices.SortStableFunc(v.Events, func(x, y Event) int {
		return cmp.Or(x.At.Compare(y.At), strings.Compare(x.Runner, y.Runner))
	})
	writeJSON(w, http.StatusOK, v)
	return nil
}

// sortRunners sorts runners by id.
func sortRunners(rs []storage.RunnerInfo) {
	slices.SortFunc(rs, func(a, b storage.RunnerInfo) int { return strings.Compare(a.ID, b.ID) })
}

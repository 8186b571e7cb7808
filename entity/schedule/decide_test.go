package schedule

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
)

// bucket0 is a tick at a multiple of MaxBatch seconds: a catch-up batch
// from it may hold MaxBatch ticks.
var bucket0 = time.Unix(1_790_000_128, 0).UTC()

func allWithin(w time.Duration) *Schedule {
	return &Schedule{CatchUp: CatchUpAll, CatchUpWindow: task.Duration(w)}
}

// TestDecideCatchUpAll: a late tick under CatchUpAll fires every due tick
// from it in order, late (on time within the grace), a batch at most,
// and the chain goes on with the first tick not fired; ticks older than
// the window are missed, the window's edge included in it.
func TestDecideCatchUpAll(t *testing.T) {
	const grace = 2 * time.Second
	s := allWithin(time.Hour)
	T := bucket0
	sec := func(n int) time.Time { return T.Add(time.Duration(n) * time.Second) }
	span := func(from, to int) []time.Time { // ticks from..to, both in
		var out []time.Time
		for i := from; i <= to; i++ {
			out = append(out, sec(i))
		}
		return out
	}

	// On time: as every policy.
	if d := decide(s, every1s, time.UTC, T, T.Add(1500*time.Millisecond), grace, MaxBatch); !slices.Equal(firedTicks(d), []time.Time{T}) ||
		d.outcome != OutcomeOnTime || !d.next.Equal(sec(1)) || d.missed != 0 || d.skipped != 0 {
		t.Fatalf("on time: %+v", d)
	}

	// 10.5 s late: ticks +0…+10 fire, +0…+8 late, +9 and +10 within the
	// grace; the chain goes on at +11, not due yet.
	d := decide(s, every1s, time.UTC, T, T.Add(10500*time.Millisecond), grace, MaxBatch)
	if !slices.Equal(firedTicks(d), span(0, 10)) || d.outcome != OutcomeLate || !d.next.Equal(sec(11)) || d.missed != 0 || d.skipped != 0 {
		t.Fatalf("10.5s late: %+v", d)
	}
	for i, f := range d.fires {
		if want := OutcomeLate; i >= 9 && f.outcome != OutcomeOnTime || i < 9 && f.outcome != want {
			t.Errorf("tick +%d: outcome %s", i, f.outcome)
		}
	}

	// The window's edge: a tick exactly the window old fires, one a
	// second older is missed.
	d = decide(s, every1s, time.UTC, T, T.Add(time.Hour), grace, MaxBatch)
	if d.missed != 0 || !firedTicks(d)[0].Equal(T) || len(d.fires) != MaxBatch || !d.next.Equal(sec(MaxBatch)) {
		t.Fatalf("at the window's edge: missed %d, fires %s…, %d, next %s", d.missed, d.fires[0].tick, len(d.fires), d.next)
	}
	d = decide(s, every1s, time.UTC, T, T.Add(time.Hour+time.Second), grace, MaxBatch)
	if d.missed != 1 || !firedTicks(d)[0].Equal(sec(1)) || len(d.fires) != MaxBatch-1 || !d.next.Equal(sec(MaxBatch)) {
		t.Fatalf("a second past the window: missed %d, fires %s…, %d, next %s", d.missed, d.fires[0].tick, len(d.fires), d.next)
	}

	// Three hours late: the first two hours are missed (counted exactly);
	// the batch starts at the window and ends at the next multiple of
	// MaxBatch seconds (7200 s is 28×256 + 32).
	d = decide(s, every1s, time.UTC, T, T.Add(3*time.Hour), grace, MaxBatch)
	if d.missed != 7200 || !slices.Equal(firedTicks(d), span(7200, 29*MaxBatch-1)) || !d.next.Equal(sec(29*MaxBatch)) || d.outcome != OutcomeLate {
		t.Fatalf("3h late: missed %d, %d fires from %s, next %s, %s", d.missed, len(d.fires), d.fires[0].tick, d.next, d.outcome)
	}

	// Every due tick older than the window: none fires, the chain goes on
	// with the first tick within it (a window of a second shorter than a
	// tick's period: an hourly schedule).
	hourly, loc, err := parse("@hourly", "")
	if err != nil {
		t.Fatal(err)
	}
	h0 := time.Date(2026, 11, 22, 17, 0, 0, 0, time.UTC)
	d = decide(allWithin(time.Second), hourly, loc, h0, h0.Add(30*time.Minute), grace, MaxBatch)
	if len(d.fires) != 0 || d.missed != 1 || d.outcome != OutcomeMissed || !d.next.Equal(h0.Add(time.Hour)) {
		t.Fatalf("hourly, 30 min late, 1s window: %+v", d)
	}
	// A window shorter than the grace acts as the grace.
	d = decide(allWithin(time.Second), every1s, time.UTC, T, T.Add(2500*time.Millisecond), grace, MaxBatch)
	if !slices.Equal(firedTicks(d), span(1, 2)) || d.missed != 1 || d.outcome != OutcomeOnTime {
		t.Fatalf("1s window, 2s grace: %+v", d)
	}

	// A calendar schedule: every 15 s, 2 min late.
	q, loc, err := parse("*/15 * * * * *", "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	q0 := T.Add(2 * time.Second) // 14:15:30 UTC
	d = decide(s, q, loc, q0, q0.Add(120*time.Second), grace, MaxBatch)
	if len(d.fires) != 9 || !d.fires[0].tick.Equal(q0) || !d.fires[8].tick.Equal(q0.Add(120*time.Second)) || !d.next.Equal(q0.Add(135*time.Second)) {
		t.Fatalf("*/15 s, 2 min late: %v next %s", firedTicks(d), d.next)
	}
}

// TestCatchUpChain plays a chain of drivers behind by ten minutes (an
// outage) until it has caught up, the way the host runs them: each
// driver after the one before, a little later. Every tick of the span
// fires once, in order, in batches of at most MaxBatch; the chain is
// back on time with a driver per tick.
func TestCatchUpChain(t *testing.T) {
	const grace = 2 * time.Second
	s := allWithin(time.Hour)
	T := bucket0.Add(17 * time.Second) // batches not aligned with the outage
	now := T.Add(10 * time.Minute)
	end := now.Add(30 * time.Second)
	var fired []time.Time
	runs, batches := 0, 0
	var last decision
	for cur := T; cur.Before(end); runs++ {
		if now.Before(cur) {
			now = cur.Add(300 * time.Millisecond) // the driver starts when due
		}
		d := decide(s, every1s, time.UTC, cur, now, grace, MaxBatch)
		if len(d.fires) == 0 || len(d.fires) > MaxBatch || d.missed != 0 {
			t.Fatalf("run at %s (now %s): %d fires, %d missed", cur, now, len(d.fires), d.missed)
		}
		if len(d.fires) > 1 {
			batches++
		}
		fired = append(fired, firedTicks(d)...)
		now = now.Add(time.Duration(len(d.fires)) * 20 * time.Millisecond) // a submit takes time
		cur, last = d.next, d
	}
	for i, f := range fired {
		if want := T.Add(time.Duration(i) * time.Second); !f.Equal(want) {
			t.Fatalf("fire %d is tick %s, want %s (fired %d ticks in %d runs)", i, f, want, len(fired), runs)
		}
	}
	// 239 + 256 ticks in the first two buckets, the rest due by then in
	// the third, and those due while it fired them in a short fourth.
	if batches != 4 || last.outcome != OutcomeOnTime || len(last.fires) != 1 {
		t.Fatalf("%d ticks in %d runs, %d of them batches; last run %+v", len(fired), runs, batches, last)
	}
}

// TestCatchUpForks: a driver run repeated after a crash (a fork) fires
// only ticks the first run fired or would have, and its chain meets the
// first one's at a batch's end, however the two runs were late.
func TestCatchUpForks(t *testing.T) {
	const grace = 2 * time.Second
	s := allWithin(time.Hour)
	T := bucket0.Add(200 * time.Second)
	boundary := bucket0.Add(MaxBatch * time.Second)
	// The first run was on time (fired T, submitted T+1's driver) and
	// died before its commit; the repeat is 20 s late, and re-submits
	// T+1's driver, which runs after it.
	first := decide(s, every1s, time.UTC, T, T.Add(300*time.Millisecond), grace, MaxBatch)
	again := decide(s, every1s, time.UTC, T, T.Add(20300*time.Millisecond), grace, MaxBatch)
	succ := decide(s, every1s, time.UTC, first.next, T.Add(20500*time.Millisecond), grace, MaxBatch)
	if !again.next.Equal(succ.next) || !again.next.Equal(T.Add(21*time.Second)) {
		t.Fatalf("forks go on at %s and %s, want both at +21s", again.next, succ.next)
	}
	// Forks behind by minutes end their batches at the bucket's end,
	// wherever they start and however late each runs.
	for _, f := range []struct {
		tick time.Time
		lag  time.Duration
	}{{T, 5 * time.Minute}, {T.Add(time.Second), 5*time.Minute + 700*time.Millisecond}, {T.Add(31 * time.Second), 7 * time.Minute}} {
		d := decide(s, every1s, time.UTC, f.tick, T.Add(f.lag), grace, MaxBatch)
		if !d.next.Equal(boundary) || !d.fires[len(d.fires)-1].tick.Equal(boundary.Add(-time.Second)) {
			t.Errorf("fork at %s, %s late: fires to %s, next %s, want next %s", f.tick, f.lag, d.fires[len(d.fires)-1].tick, d.next, boundary)
		}
	}
	// A batch the driver ended early (its time budget) goes on from the
	// tick it stopped at, to the same end.
	if d := decide(s, every1s, time.UTC, T.Add(40*time.Second), T.Add(6*time.Minute), grace, MaxBatch); !d.next.Equal(boundary) {
		t.Errorf("rest of a cut batch goes on at %s, want %s", d.next, boundary)
	}
}

// TestSeekAndAfter: @every ticks are found by arithmetic on the chain's
// own grid, as walking finds them, and a schedule's next tick after any
// time lies on its generation's grid, so that a resume (twice, or before
// the paused chain's next tick) submits the chain's driver id.
func TestSeekAndAfter(t *testing.T) {
	e7, loc, err := parse("@every 7s", "")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 11, 22, 17, 0, 3, 0, time.UTC)
	for _, x := range []time.Duration{0, time.Nanosecond, 7 * time.Second, 7*time.Second + 1, 50 * time.Second, 3 * time.Hour} {
		got, n := seek(e7, loc, from, from.Add(x))
		walk, m := from, 0
		for walk.Before(from.Add(x)) {
			walk, m = next(e7, loc, walk), m+1
		}
		if !got.Equal(walk) || n != m {
			t.Errorf("seek +%s: %s after %d, walking finds %s after %d", x, got, n, walk, m)
		}
	}

	created := time.Date(2026, 11, 22, 12, 0, 3, 400e6, time.UTC)
	s := &Schedule{Cron: "@every 10s", Generation: created.UnixNano()}
	for _, c := range []struct{ at, want string }{
		{"12:00:03.4", "12:00:13"}, {"12:00:05", "12:00:13"}, {"12:00:13", "12:00:23"},
		{"12:00:20", "12:00:23"}, {"12:00:22.999", "12:00:23"}, {"13:00:00", "13:00:03"},
	} {
		at, _ := time.Parse("15:04:05.999", c.at)
		want, _ := time.Parse("15:04:05", c.want)
		day := func(t time.Time) time.Time {
			return time.Date(2026, 11, 22, t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
		}
		if got := s.Next(day(at)); !got.Equal(day(want)) {
			t.Errorf("@every 10s created at 12:00:03.4: Next(%s) = %s, want %s", c.at, got.Format("15:04:05.000"), c.want)
		}
	}
}

// TestCatchUpSpecAndStored: a spec without a policy gets CatchUpAll and
// the default window; a window is refused naming catch_up_window when out
// of bounds or given to another policy; stored objects keep their policy,
// and one of CatchUpAll stored without a window reads the default.
func TestCatchUpSpecAndStored(t *testing.T) {
	base := Spec{Name: "n", Cron: "@every 1s", Type: "echo"}
	sp := base
	if err := sp.validate(0); err != nil || sp.CatchUp != CatchUpAll || sp.CatchUpWindow != DefaultCatchUpWindow {
		t.Fatalf("defaults: %+v %v", sp, err)
	}
	for _, c := range []struct {
		policy CatchUp
		window time.Duration
		field  string
	}{
		{CatchUpAll, 30 * time.Minute, ""},
		{CatchUpAll, MaxCatchUpWindow, ""},
		{CatchUpAll, MinCatchUpWindow, ""},
		{"", 90 * time.Minute, ""},
		{CatchUpAll, 500 * time.Millisecond, "catch_up_window"},
		{CatchUpAll, -time.Hour, "catch_up_window"},
		{CatchUpAll, MaxCatchUpWindow + time.Second, "catch_up_window"},
		{CatchUpSkip, time.Hour, "catch_up_window"},
		{CatchUpOnce, time.Minute, "catch_up_window"},
		{CatchUpSkip, 0, ""},
		{"every", 0, "catch_up"},
	} {
		sp := base
		sp.CatchUp, sp.CatchUpWindow = c.policy, c.window
		err := sp.validate(0)
		var ve *ValidationError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%q %s: %v", c.policy, c.window, err)
		case c.field != "" && (!errors.As(err, &ve) || ve.Field != c.field || !errors.Is(err, ErrInvalid)):
			t.Errorf("%q %s: %v, want a ValidationError on %s", c.policy, c.window, err, c.field)
		}
	}

	obj := func(policy, window string) []byte {
		w := ""
		if window != "" {
			w = `"catch_up_window":"` + window + `",`
		}
		return []byte(`{"name":"n","cron":"@every 1s","type":"echo","catch_up":"` + policy + `",` + w +
			`"paused":false,"generation":1,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","rev":1}`)
	}
	for _, c := range []struct {
		policy, window string
		want           CatchUp
		wantW          time.Duration
		corrupt        bool
	}{
		{"skip", "", CatchUpSkip, 0, false}, // created before CatchUpAll: stays skip
		{"once", "", CatchUpOnce, 0, false},
		{"all", "", CatchUpAll, DefaultCatchUpWindow, false},
		{"all", "30m0s", CatchUpAll, 30 * time.Minute, false},
		{"all", "-1s", "", 0, true},
		{"skip", "1h0m0s", "", 0, true},
		{"", "", "", 0, true}, // a policy is always stored
	} {
		s, err := decode("k", obj(c.policy, c.window))
		switch {
		case c.corrupt && !errors.Is(err, ErrCorrupt):
			t.Errorf("%q %q: %v, want corrupt", c.policy, c.window, err)
		case !c.corrupt && (err != nil || s.CatchUp != c.want || s.CatchUpWindow.Std() != c.wantW):
			t.Errorf("%q %q: %+v %v", c.policy, c.window, s, err)
		}
	}
}

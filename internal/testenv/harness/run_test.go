package harness

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRunStops: Stop cancels the run and returns its error, once; a run
// that ignores its context is reported after the bound; Exited tells a
// run that returned on its own.
func TestRunStops(t *testing.T) {
	boom := errors.New("boom")
	r := Go(func(ctx context.Context) error { <-ctx.Done(); return boom })
	if exited, _ := r.Exited(); exited || !r.Running() {
		t.Fatal("a fresh run exited or is not running")
	}
	if err := r.Stop(5 * time.Second); !errors.Is(err, boom) {
		t.Fatalf("Stop = %v, want the run's error", err)
	}
	if err := r.Stop(5 * time.Second); err != nil || r.Running() {
		t.Fatalf("second Stop = %v, running %v", err, r.Running())
	}

	release := make(chan struct{})
	stuck := Go(func(context.Context) error { <-release; return nil })
	if err := stuck.Stop(10 * time.Millisecond); !errors.Is(err, ErrStopTimeout) {
		t.Fatalf("Stop of a stuck run = %v, want ErrStopTimeout", err)
	}
	close(release)

	quit := Go(func(context.Context) error { return boom })
	var exited bool
	var err error
	if aerr := Await(context.Background(), 5*time.Second, time.Millisecond, func() (bool, string, error) {
		exited, err = quit.Exited()
		return exited, "not exited", nil
	}); aerr != nil || !errors.Is(err, boom) || !quit.Running() {
		t.Fatalf("a run that quit: %v, exited with %v, running %v", aerr, err, quit.Running())
	}
	quit.Stop(time.Second)
}

type node struct {
	*Run
	id string
}

// TestMembersListsRunning: members in id order, the stopped ones left out
// of Running but kept in All.
func TestMembersListsRunning(t *testing.T) {
	var ms Members[*node]
	for _, id := range []string{"c", "a", "b"} {
		ms.Add(id, &node{Run: Go(func(ctx context.Context) error { <-ctx.Done(); return nil }), id: id})
	}
	ms.Get("b").Stop(time.Second)
	ids := func(ns []*node) (out []string) {
		for _, n := range ns {
			out = append(out, n.id)
		}
		return out
	}
	if got := ids(ms.Running()); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Fatalf("Running = %v, want [a c]", got)
	}
	if got := ids(ms.All()); len(got) != 3 || got[1] != "b" {
		t.Fatalf("All = %v, want [a b c]", got)
	}
	for _, n := range ms.All() {
		n.Stop(time.Second)
	}
}

// TestAwaitTimesOut: Await returns at once when the condition holds, its
// error when it fails, and a timeout carrying the last reason.
func TestAwaitTimesOut(t *testing.T) {
	ctx := context.Background()
	if err := Await(ctx, time.Second, time.Millisecond, func() (bool, string, error) { return true, "", nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := Await(ctx, time.Second, time.Millisecond, func() (bool, string, error) { return false, "", boom }); !errors.Is(err, boom) {
		t.Fatalf("Await = %v, want the condition's error", err)
	}
	err := Await(ctx, 20*time.Millisecond, time.Millisecond, func() (bool, string, error) { return false, "3 of 4", nil })
	if !errors.Is(err, ErrTimeout) || err.Error() != "harness: timed out after 20ms: 3 of 4" {
		t.Fatalf("Await = %v", err)
	}
}

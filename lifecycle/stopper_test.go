package lifecycle

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestStopperTasks: tasks run until they return; Stop waits for them
// after quiescing; a task started after Quiesce is refused; Done closes
// when the last one returns.
func TestStopperTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(context.Background(), "host")
		release := make(chan struct{})
		for _, name := range []string{"executor default/1", "executor default/0"} {
			if err := s.Go(name, func(ctx context.Context) { <-release }); err != nil {
				t.Fatal(err)
			}
		}
		end, err := s.Enter("call echo/e1")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := s.Running(); !slices.Equal(got, []string{"call echo/e1", "executor default/0", "executor default/1"}) {
			t.Fatalf("Running = %v", got)
		}
		s.Quiesce()
		if err := s.Go("late", func(context.Context) {}); !errors.Is(err, ErrQuiescing) {
			t.Fatalf("Go after Quiesce: %v, want ErrQuiescing", err)
		}
		if _, err := s.Enter("late call"); !errors.Is(err, ErrQuiescing) {
			t.Fatalf("Enter after Quiesce: %v, want ErrQuiescing", err)
		}
		select {
		case <-s.Done():
			t.Fatal("Done closed with tasks running")
		default:
		}
		end()
		end() // a second end is a no-op
		close(release)
		if err := s.Stop(context.Background()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		select {
		case <-s.Done():
		default:
			t.Fatal("Done not closed after Stop")
		}
	})
}

// TestStopperOverrunNamesTasks: a Stop whose context ends before a task
// returns names the tasks still running; Cancel asks them to return.
func TestStopperOverrunNamesTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(context.Background(), "manager")
		s.Go("watch membership", func(ctx context.Context) { <-ctx.Done() })
		s.Go("stubborn handler", func(ctx context.Context) { time.Sleep(time.Hour) })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := s.Stop(ctx)
		var oe *OverrunError
		if !errors.As(err, &oe) || !errors.Is(err, context.DeadlineExceeded) || oe.Stopper != "manager" ||
			!slices.Equal(oe.Running, []string{"stubborn handler", "watch membership"}) {
			t.Fatalf("Stop past its deadline: %v", err)
		}
		s.Cancel(errors.New("stopping"))
		synctest.Wait()
		if got := s.Running(); !slices.Equal(got, []string{"stubborn handler"}) {
			t.Fatalf("after Cancel, running %v, want only the task that ignores its context", got)
		}
		if cause := context.Cause(s.Ctx()); cause == nil || cause.Error() != "stopping" {
			t.Fatalf("Ctx cause %v", cause)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestShutdownRunsStepsInOrder: every step runs, in the written order,
// even after one fails; the error names the failed steps.
func TestShutdownRunsStepsInOrder(t *testing.T) {
	var ran []string
	step := func(name string, err error) Step {
		return Step{Name: name, Do: func(context.Context) error { ran = append(ran, name); return err }}
	}
	sd := Shutdown{step("stop taking work", nil), step("drain", errors.New("2 shards left")), step("release", nil), step("close", nil)}
	err := sd.Run(context.Background(), nil)
	if !slices.Equal(ran, []string{"stop taking work", "drain", "release", "close"}) || !slices.Equal(sd.Names(), ran) {
		t.Fatalf("ran %v", ran)
	}
	if err == nil || err.Error() != "drain: 2 shards left" {
		t.Fatalf("Run: %v, want the drain's error named", err)
	}
}

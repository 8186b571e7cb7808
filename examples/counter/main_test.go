package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/tenuretest"
)

func TestMain(m *testing.M) { tenuretest.Main(m) }

// TestCounterOperations: Add adds and answers the total; an add out of
// bounds is the application's invalid and changes nothing; Get saves
// nothing; the total is what a runner would have saved, and survives the
// instance's passivation.
func TestCounterOperations(t *testing.T) {
	u := tenuretest.New(t, counters)
	for _, c := range []struct{ n, want int64 }{{3, 3}, {-1, 2}, {1e9, 1_000_000_002}} {
		if got, err := tenuretest.Call[int64](u, "counter", "c1", "Add", c.n); err != nil || got != c.want {
			t.Fatalf("Add(%d) = %d, %v; want %d", c.n, got, err, c.want)
		}
	}
	_, err := tenuretest.Call[int64](u, "counter", "c1", "Add", int64(1e9+1))
	var ae *entity.AppError
	if !errors.As(err, &ae) || ae.Code != entity.CodeInvalid {
		t.Fatalf("Add(1e9+1): %v, want the application's invalid", err)
	}
	saves := u.Saves("counter", "c1")
	u.Passivate("counter", "c1")
	if got, err := tenuretest.Call[int64](u, "counter", "c1", "", nil); err != nil || got != 1_000_000_002 {
		t.Fatalf("Get (the default) after passivation = %d, %v", got, err)
	}
	if got := tenuretest.State[Counter](u, "counter", "c1"); got.Total != 1_000_000_002 || u.Saves("counter", "c1") != saves {
		t.Fatalf("saved %+v after %d saves (was %d)", got, u.Saves("counter", "c1"), saves)
	}
}

// TestCounterSurvivesOwnerStop: on two real runners (embedded etcd and
// S3), the total a counter's owner saved is the one its successor answers
// once the owner has stopped, and adds go on from it.
func TestCounterSurvivesOwnerStop(t *testing.T) {
	c := tenuretest.NewCluster(t, tenuretest.ClusterOptions{Runners: 2, Entities: []*entity.Definition{counters}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	add := entity.Operation[int64, int64]{Type: "counter", Name: "Add"}
	for i := range 5 {
		if _, err := add.Call(ctx, c.Client(), "alice", int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	c.Stop(c.Owner("counter", "alice"))
	var total int64
	tenuretest.WaitFor(t, "a Get of counter/alice on its successor", 20*time.Second, func() bool {
		var err error
		total, err = entity.Call[int64](ctx, c.Client(), "counter", "alice", "Get", nil)
		return err == nil
	})
	if total != 15 {
		t.Fatalf("total after the owner stopped: %d, want 1+2+3+4+5", total)
	}
	if total, err := add.Call(ctx, c.Client(), "alice", 1); err != nil || total != 16 {
		t.Fatalf("Add(1) on the successor: %d, %v; want 16", total, err)
	}
}

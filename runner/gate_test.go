package runner

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// typeGate is the test entity type whose calls run until the test opens
// its gate.
const typeGate = "gate"

// callGate holds the calls of typeGate: a test keeps a window open with it
// (a planned release of a shard waits for the calls running on it), rather
// than hoping the window lasts long enough to observe.
type callGate struct {
	entered chan string   // the runner on which a held call started
	open    chan struct{} // closed by the test to let the calls return
}

func newCallGate() *callGate {
	return &callGate{entered: make(chan string, 1), open: make(chan struct{})}
}

// handler is typeGate's handler on runner id. It honours its context: an
// interruption ends the hold.
func (g *callGate) handler(id string) func(context.Context, *task.Task) (json.RawMessage, error) {
	return func(ctx context.Context, _ *task.Task) (json.RawMessage, error) {
		select {
		case g.entered <- id:
		default:
		}
		select {
		case <-g.open:
			return json.RawMessage(`{}`), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// hold calls (typeGate, id) through cli and returns once its handler runs
// on runner want; the channel gets the call's outcome once the gate opens.
func (g *callGate) hold(ctx context.Context, t *testing.T, cli *Client, id, want string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := cli.Call(ctx, typeGate, id, []byte(`{}`))
		done <- err
	}()
	select {
	case on := <-g.entered:
		if on != want {
			t.Fatalf("the held call of %s/%s runs on %s, want %s", typeGate, id, on, want)
		}
	case err := <-done:
		t.Fatalf("the call of %s/%s returned before it was held: %v", typeGate, id, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("the call of %s/%s did not start within 10s", typeGate, id)
	}
	return done
}

// gateEntityOn returns a typeGate entity id in one of the shards x owns.
func gateEntityOn(t *testing.T, x *running, shards int) string {
	t.Helper()
	mgr, _ := x.r.parts()
	owned := map[storage.ShardID]bool{}
	for _, o := range mgr.Status().Owned {
		owned[o.Shard] = true
	}
	if len(owned) == 0 {
		t.Fatalf("runner %s owns no shard", x.r.cfg.RunnerID)
	}
	for i := 0; ; i++ {
		id := "g" + strconv.Itoa(i)
		if owned[task.ShardOf(storage.DefaultGroup, shards, typeGate, id, "")] {
			return id
		}
	}
}

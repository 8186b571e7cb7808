package messaging

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

func TestPoolReusesAndDropsIdle(t *testing.T) {
	p := newPool(nil, 1<<20, 50*time.Millisecond)
	defer p.close()
	a1, err := p.get("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := p.get("127.0.0.1:1")
	if a1 != a2 || p.size() != 1 {
		t.Fatalf("second get made a new connection (%d open)", p.size())
	}
	// Only b is used from now on: a's connection goes once idle.
	testenv.WaitFor(t, "the idle connection closed", 5*time.Second, func() bool {
		if _, err := p.get("127.0.0.1:2"); err != nil {
			t.Fatal(err)
		}
		p.mu.RLock()
		_, ok := p.conns["127.0.0.1:1"]
		p.mu.RUnlock()
		return !ok
	})
	p.close()
	if _, err := p.get("127.0.0.1:2"); err != ErrClosed || p.size() != 0 {
		t.Fatalf("get after close: %v, %d open; want ErrClosed, 0", err, p.size())
	}
}

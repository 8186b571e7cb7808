package integration

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

// pacedLoad runs op(i) for i in [0, n) on workers goroutines, op i
// starting pace after op i−1 (or later, when every worker is busy), so
// that faults injected by count fall in the middle of the load rather
// than after it.
type pacedLoad struct {
	began time.Time
	done  atomic.Int64
	wg    sync.WaitGroup
}

func startPacedLoad(n, workers int, pace time.Duration, op func(i int)) *pacedLoad {
	l := &pacedLoad{began: time.Now()}
	queue := make(chan int)
	go func() {
		defer close(queue)
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for i := range n {
			<-tick.C
			queue <- i
		}
	}()
	for range workers {
		l.wg.Go(func() {
			for i := range queue {
				op(i)
				l.done.Add(1)
			}
		})
	}
	return l
}

// await waits until n ops are done, before what happens next.
func (l *pacedLoad) await(t *testing.T, n int, what string, within time.Duration) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("%d ops done before %s", n, what), within, func() bool { return l.done.Load() >= int64(n) })
}

// at says how far the load is, for the log: "123 ops (4.5s)".
func (l *pacedLoad) at() string {
	return fmt.Sprintf("%d ops (%s)", l.done.Load(), time.Since(l.began).Round(time.Millisecond))
}

// wait waits for every op.
func (l *pacedLoad) wait() { l.wg.Wait() }

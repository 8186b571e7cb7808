package harness

import (
	"slices"
	"strings"
	"sync"
)

// Member is what the harness asks of a layer's node.
type Member interface {
	// Running reports whether the node was started and has not been
	// stopped (or, for a process, has not exited).
	Running() bool
}

// Members are a cluster's nodes by id. The zero value is empty and ready;
// it is safe for concurrent use, as checks list the members from their
// own goroutines while a test starts more.
type Members[M Member] struct {
	mu   sync.Mutex
	byID map[string]M
}

// Add records m as member id, replacing any earlier member of that id.
func (ms *Members[M]) Add(id string, m M) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.byID == nil {
		ms.byID = map[string]M{}
	}
	ms.byID[id] = m
}

// Get returns member id (the zero M if there is none).
func (ms *Members[M]) Get(id string) M {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.byID[id]
}

// All returns every member ever added, in id order.
func (ms *Members[M]) All() []M { return ms.list(func(M) bool { return true }) }

// Running returns the running members, in id order.
func (ms *Members[M]) Running() []M { return ms.list(M.Running) }

func (ms *Members[M]) list(keep func(M) bool) []M {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ids := make([]string, 0, len(ms.byID))
	for id := range ms.byID {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, strings.Compare)
	var out []M
	for _, id := range ids {
		if m := ms.byID[id]; keep(m) {
			out = append(out, m)
		}
	}
	return out
}

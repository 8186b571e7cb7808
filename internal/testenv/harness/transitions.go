package harness

import (
	"sync"

	"github.com/tenurehq/tenure/detachment"
)

// Transitions keeps the transitions of one runner's detachment machine:
// pass Record to the machine's Subscribe. The zero value is ready.
type Transitions struct {
	mu   sync.Mutex
	list []detachment.Transition
}

// Record appends tr.
func (l *Transitions) Record(tr detachment.Transition) {
	l.mu.Lock()
	l.list = append(l.list, tr)
	l.mu.Unlock()
}

// Of returns the transitions of kind, in order.
func (l *Transitions) Of(kind detachment.TransitionKind) []detachment.Transition {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []detachment.Transition
	for _, tr := range l.list {
		if tr.Kind == kind {
			out = append(out, tr)
		}
	}
	return out
}

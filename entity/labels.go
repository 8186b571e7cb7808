package entity

import (
	"sync"
	"unicode/utf8"
)

// Label values of the task type, bounded.
//
// Task types come from whoever submits tasks, so a label taking every type
// seen verbatim would let any client grow the runner's series without
// limit (a typo loop, a type per customer). Registered types are bounded by
// the code and keep their name; the first few unregistered ones keep
// theirs too, which is what an operator needs to spot a missing handler,
// and every later one shares otherTypeLabel.
const (
	// maxUnregisteredTypeLabels is how many distinct unregistered types
	// get a value of their own per host.
	maxUnregisteredTypeLabels = 16
	// maxTypeLabelLen caps a value's length; a longer type is "other".
	maxTypeLabelLen = 128
	// otherTypeLabel is the value every further unregistered type shares.
	otherTypeLabel = "_other"
)

// typeLabels maps task types to label values: registered ones as they
// are, at most maxUnregisteredTypeLabels others as they are, the rest to
// otherTypeLabel.
type typeLabels struct {
	registered func(typ string) bool

	mu   sync.Mutex
	seen map[string]struct{} // unregistered types given a value of their own
}

func newTypeLabels(registered func(typ string) bool) *typeLabels {
	return &typeLabels{registered: registered, seen: map[string]struct{}{}}
}

// value returns the label value of typ.
func (l *typeLabels) value(typ string) string {
	if l == nil || l.registered(typ) {
		return typ
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[typ]; ok {
		return typ
	}
	if len(l.seen) >= maxUnregisteredTypeLabels || len(typ) > maxTypeLabelLen || !utf8.ValidString(typ) {
		return otherTypeLabel
	}
	l.seen[typ] = struct{}{}
	return typ
}

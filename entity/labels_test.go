package entity

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestTypeLabelsBounded: task types are client input, so the type label
// takes registered types verbatim, a bounded number of unregistered ones
// verbatim, and collapses the rest into one value.
func TestTypeLabelsBounded(t *testing.T) {
	l := newTypeLabels(func(typ string) bool { return strings.HasPrefix(typ, "reg-") })
	for i := range 100 {
		if got, want := l.value(fmt.Sprintf("reg-%d", i)), fmt.Sprintf("reg-%d", i); got != want {
			t.Fatalf("registered type %q labelled %q", want, got)
		}
	}
	values := map[string]bool{}
	for i := range 1000 {
		values[l.value(fmt.Sprintf("client-%d", i))] = true
	}
	if len(values) != maxUnregisteredTypeLabels+1 || !values[otherTypeLabel] {
		t.Fatalf("1000 unregistered types gave %d label values (want %d, %q among them)", len(values), maxUnregisteredTypeLabels+1, otherTypeLabel)
	}
	if got := l.value("client-3"); got != "client-3" {
		t.Fatalf("an unregistered type seen early lost its value: %q", got)
	}
	if got := l.value("client-999"); got != otherTypeLabel {
		t.Fatalf("a late unregistered type got %q, want %q", got, otherTypeLabel)
	}
	fresh := newTypeLabels(func(string) bool { return false })
	if got := fresh.value(strings.Repeat("x", maxTypeLabelLen+1)); got != otherTypeLabel {
		t.Fatalf("an over-long type got its own value")
	}
}

// TestAttemptsCountedUnderBothNames: tenure_tasks_attempts_total is the
// counter's name; tenure_tasks_total carries the same series for one more
// release, so dashboards and alerts on the old name keep working.
func TestAttemptsCountedUnderBothNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.types = newTypeLabels(func(typ string) bool { return typ == "job" })
	m.attempt("job", outcomeCompleted)
	m.attempt("job", outcomeCompleted)
	m.attempt("job", outcomeFailed)
	for i := range 40 {
		m.attempt(fmt.Sprintf("junk-%d", i), outcomeFailed)
		m.unhandledType(fmt.Sprintf("junk-%d", i))
	}
	for _, name := range []string{"tenure_tasks_attempts_total", "tenure_tasks_total"} {
		if got := testutil.ToFloat64(m.attemptsVec(name).WithLabelValues("job", outcomeCompleted)); got != 2 {
			t.Fatalf("%s{job,completed} = %v, want 2", name, got)
		}
	}
	n, err := testutil.GatherAndCount(reg, "tenure_tasks_attempts_total", "tenure_tasks_total", "tenure_tasks_unhandled_total")
	if err != nil {
		t.Fatal(err)
	}
	// Per name: job×{completed,failed} + 16 junk types + _other.
	if want := 2*(2+maxUnregisteredTypeLabels+1) + maxUnregisteredTypeLabels + 1; n != want {
		t.Fatalf("%d series after 40 unregistered types, want %d", n, want)
	}
}

// attemptsVec returns the attempts counter under name (the new or the
// deprecated one).
func (m *metrics) attemptsVec(name string) *prometheus.CounterVec {
	if name == "tenure_tasks_total" {
		return m.tasksOld
	}
	return m.attempts
}

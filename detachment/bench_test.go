package detachment

import (
	"testing"
	"time"
)

// BenchmarkKeepAliveOK measures the steady-state input: an attached machine
// whose deadline moves (and cutoff timer is re-armed) on every call.
func BenchmarkKeepAliveOK(b *testing.B) {
	m, err := New(DefaultConfig(ttl), ttl)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	m.Subscribe(func(Transition) {})
	for b.Loop() {
		m.KeepAliveOK(1, time.Now(), ttl)
	}
	if !m.State().Attached {
		b.Fatal("not attached")
	}
}

// BenchmarkAttachmentRead measures Attachment, which every shard and task
// start calls.
func BenchmarkAttachmentRead(b *testing.B) {
	m, err := New(DefaultConfig(ttl), ttl)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	m.KeepAliveOK(1, time.Now(), ttl)
	for b.Loop() {
		if _, _, ok := m.Attachment(); !ok {
			b.Fatal("not attached")
		}
	}
}

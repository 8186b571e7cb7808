package sharding

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// registerInitial registers the runner, waiting out a previous incarnation
// whose lease still holds the id (it expires within one TTL of its crash).
func (m *Manager) registerInitial(ctx context.Context) error {
	deadline := time.Now().Add(m.cfg.LeaseTTL + 2*time.Second)
	backoff := 100 * time.Millisecond
	for {
		err := m.register(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, storage.ErrRunnerExists) || time.Now().After(deadline) {
			return fmt.Errorf("sharding: register runner %s: %w", m.self.ID, err)
		}
		m.log.Info("runner id still registered by a previous lease; waiting for it to expire", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// register opens a new session and starts its keep-alive loop, which feeds
// the machine (keepalive.go).
func (m *Manager) register(ctx context.Context) error {
	m.mu.Lock()
	self := m.self
	if m.draining {
		self.Weight = 0
	}
	m.mu.Unlock()
	ss, err := m.store.Register(ctx, self, m.cfg.LeaseTTL)
	if err != nil {
		m.storageResult("register", err)
		return err
	}
	m.machine.StorageOK()
	m.mu.Lock()
	m.session = ss
	m.mu.Unlock()
	m.log.Info("registered", "lease", fmt.Sprintf("%x", ss.LeaseID()), "ttl", ss.TTL())
	go m.keepAlive(ss)
	return nil
}

package runner

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestReconcileMaxIntervalConfig: entity.reconcile_max_interval defaults
// to 1h, comes from YAML, TENURE_* variables and flags into the entity
// config, and a value under entity.reconcile_interval is refused naming
// the key.
func TestReconcileMaxIntervalConfig(t *testing.T) {
	c, err := Load(writeFile(t, minimal), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ec := c.EntityConfig(); ec.ReconcileMaxInterval != time.Hour {
		t.Fatalf("default entity.reconcile_max_interval %s, want 1h", ec.ReconcileMaxInterval)
	}
	c, err = Load(writeFile(t, minimal+"entity:\n  reconcile_max_interval: 10m\n"), nil, nil)
	if err != nil || c.EntityConfig().ReconcileMaxInterval != 10*time.Minute {
		t.Fatalf("from YAML: %v %s", err, c.EntityConfig().ReconcileMaxInterval)
	}
	c, err = Load(writeFile(t, minimal), []string{"TENURE_ENTITY_RECONCILE_MAX_INTERVAL=20m"}, nil)
	if err != nil || c.EntityConfig().ReconcileMaxInterval != 20*time.Minute {
		t.Fatalf("from the environment: %v %s", err, c.EntityConfig().ReconcileMaxInterval)
	}
	c, err = Load(writeFile(t, minimal), nil, []string{"entity.reconcile_max_interval=30m"})
	if err != nil || c.EntityConfig().ReconcileMaxInterval != 30*time.Minute {
		t.Fatalf("from a flag: %v %s", err, c.EntityConfig().ReconcileMaxInterval)
	}
	for _, args := range [][]string{
		{"entity.reconcile_max_interval=30s"},
		{"entity.reconcile_interval=2h"},
	} {
		_, err := Load(writeFile(t, minimal), nil, args)
		if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "entity.reconcile_max_interval") {
			t.Errorf("%v: %v, want an ErrInvalidConfig naming entity.reconcile_max_interval", args, err)
		}
	}
}

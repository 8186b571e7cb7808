package runner

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestTaskRetentionKeys: entity.task_retention defaults to 7 days and
// entity.task_sweep_interval to 0 (derived); both come from YAML, TENURE_*
// variables and flags into the entity config, 0 keeps finished tasks, and
// out-of-range values are refused naming the key.
func TestTaskRetentionKeys(t *testing.T) {
	c, err := Load(writeFile(t, minimal), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ec := c.EntityConfig(); ec.TaskRetention != 7*24*time.Hour || ec.TaskSweepInterval != 0 {
		t.Fatalf("defaults: retention %s, sweep interval %s", ec.TaskRetention, ec.TaskSweepInterval)
	}
	c, err = Load(writeFile(t, minimal+"entity:\n  task_retention: 72h\n"), []string{"TENURE_ENTITY_TASK_SWEEP_INTERVAL=10m"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ec := c.EntityConfig(); ec.TaskRetention != 72*time.Hour || ec.TaskSweepInterval != 10*time.Minute {
		t.Fatalf("from YAML and env: retention %s, sweep interval %s", ec.TaskRetention, ec.TaskSweepInterval)
	}
	c, err = Load(writeFile(t, minimal), nil, []string{"entity.task_retention=0"})
	if err != nil || c.EntityConfig().TaskRetention != 0 {
		t.Fatalf("task_retention=0: %v %s", err, c.EntityConfig().TaskRetention)
	}
	for _, tc := range []struct{ arg, key string }{
		{"entity.task_retention=500ms", "entity.task_retention"},
		{"entity.task_retention=-1h", "entity.task_retention"},
		{"entity.task_sweep_interval=10ms", "entity.task_sweep_interval"},
	} {
		_, err := Load(writeFile(t, minimal), nil, []string{tc.arg})
		if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: %v, want an ErrInvalidConfig naming %s", tc.arg, err, tc.key)
		}
	}
}

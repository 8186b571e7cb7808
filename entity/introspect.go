package entity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// What a status page reads of a host: how many entities are resident and
// which, the operations of a type, and counters of the work done. Each is
// cheap, read under the locks that already guard what it reads.

// ResidentEntity names one resident entity instance.
type ResidentEntity struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// ResidentCount returns the number of entity instances in memory on this
// runner (the tenure_entity_resident gauge).
func (h *Host) ResidentCount() int { return h.resident.len() }

// Resident lists, sorted by type then id, at most limit (≤ 0: all) of the
// entity instances resident in shard, and whether this host runs the
// shard now (an ownership not being released); truncated reports that
// more were left out. Entity ids are user data: serve them only to
// whoever may read it.
func (h *Host) Resident(shard storage.ShardID, limit int) (out []ResidentEntity, owned, truncated bool) {
	h.mu.Lock()
	e := h.shards[shard]
	h.mu.Unlock()
	out = []ResidentEntity{}
	if e == nil {
		return out, false, false
	}
	e.sched.mu.Lock()
	for _, box := range e.sched.boxes {
		if in := box.inst.Load(); in != nil {
			out = append(out, ResidentEntity{Type: in.typ, ID: in.id})
		}
	}
	e.sched.mu.Unlock()
	slices.SortFunc(out, func(a, b ResidentEntity) int {
		return cmp.Or(strings.Compare(a.Type, b.Type), strings.Compare(a.ID, b.ID))
	})
	if limit > 0 && len(out) > limit {
		return out[:limit], true, true
	}
	return out, true, false
}

// Operations returns the operations of entity type typ as a call names
// them (lower case, sorted) when typ is registered here by Define; nil for
// a type registered otherwise (its one handler takes every call) or not
// registered here.
func (h *Host) Operations(typ string) []string {
	d, ok := h.reg.definition(typ)
	if !ok {
		return nil
	}
	ops := d.Ops()
	for i, op := range ops {
		ops[i] = strings.ToLower(op)
	}
	slices.Sort(ops)
	return ops
}

// Activity counts the work a host has done since it was made.
type Activity struct {
	// Messages counts the calls and sends whose handler ran to an end,
	// whatever its outcome.
	Messages uint64
	// TasksCompleted counts the task attempts that completed.
	TasksCompleted uint64
}

// Activity returns the host's counters, for rates (sample it twice).
func (h *Host) Activity() Activity {
	return Activity{Messages: h.metrics.served.Value(), TasksCompleted: h.metrics.completed.Load()}
}

// PendingReminder is a reminder of an entity that has not run yet: its
// task is pending (or running) with a ready pointer.
type PendingReminder struct {
	Name string    `json:"name"`
	Op   string    `json:"op"`  // the operation it runs ("" for the default)
	Due  time.Time `json:"due"` // when it is due (S3 time)
	Ref  string    `json:"ref"` // its task's ref
}

// maxReminderScan bounds the ready pointers Reminders reads (a shard may
// hold many due tasks): the listing is of the whole shard, which keeps no
// index by entity.
const maxReminderScan = 20_000

// maxRemindersLoaded bounds the reminder tasks Reminders reads for their
// operation.
const maxRemindersLoaded = 50

// Reminders lists the pending reminders of entity (typ, id) on shard, in
// due order, from the shard's ready pointers (one LIST per thousand ready
// tasks of the shard, at most maxReminderScan pointers) and each
// reminder's task (one GET, for its operation; at most
// maxRemindersLoaded). A reminder whose task is gone meanwhile is left
// out.
func Reminders(ctx context.Context, tasks *task.Store, shard storage.ShardID, typ, id string) ([]PendingReminder, error) {
	if tasks == nil {
		return nil, fmt.Errorf("%w: Reminders: nil task store", ErrInvalidConfig)
	}
	prefix := reminderPrefix + task.EntityKey(typ, id) + "-"
	out := []PendingReminder{}
	after, scanned := "", 0
	for scanned < maxReminderScan {
		ptrs, more, err := tasks.ListPointers(ctx, shard, after, storage.MaxListLimit)
		if err != nil {
			return nil, fmt.Errorf("entity: reminders of %s/%s: listing shard %s: %w", typ, id, shard, err)
		}
		for _, p := range ptrs {
			after = p.Key
			scanned++
			if !strings.HasPrefix(p.ID, prefix) {
				continue
			}
			name, ok := parseReminderID(p.ID, typ, id)
			if !ok {
				continue
			}
			r := PendingReminder{Name: name, Due: p.Due.UTC(), Ref: p.Ref()}
			if len(out) < maxRemindersLoaded {
				t, _, err := tasks.Load(ctx, shard, p.ID)
				switch {
				case errors.Is(err, task.ErrNotFound):
					continue
				case err != nil:
					return nil, fmt.Errorf("entity: reminders of %s/%s: reading %s: %w", typ, id, p.Ref(), err)
				}
				r.Op = t.Op
			}
			out = append(out, r)
		}
		if !more || len(ptrs) == 0 {
			break
		}
	}
	slices.SortFunc(out, func(a, b PendingReminder) int { return cmp.Or(a.Due.Compare(b.Due), strings.Compare(a.Name, b.Name)) })
	return out, nil
}

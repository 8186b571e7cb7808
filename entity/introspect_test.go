package entity

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// tallyEnt is a defined type for the introspection test: two operations.
type tallyEnt struct {
	N int `json:"n"`
}

func (t *tallyEnt) Add(_ Context, in struct{ N int }) (int, error) { t.N += in.N; return t.N, nil }
func (t *tallyEnt) Get(_ Context) (int, error)                     { return t.N, nil }

// TestResidentListing: a host lists the entities resident in a shard it
// owns (sorted by type then id, bounded by the limit), counts them all,
// says when it does not own a shard, lists a defined type's operations,
// and counts the messages it served.
func TestResidentListing(t *testing.T) {
	e := newEnv(t, 2)
	h := e.bareHost(func(h *Host) {
		if err := h.Define(Define[tallyEnt]("tally", nil, Default("Add"), ReadOnly("Get"), Volatile())); err != nil {
			t.Fatal(err)
		}
		if err := h.Register("echo", func(string) (Entity, error) { return echo{}, nil }); err != nil {
			t.Fatal(err)
		}
	})
	s0 := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	s1 := storage.ShardID{Group: storage.DefaultGroup, Index: 1}
	h.own(s0, 100)
	ctx := ctxFor(t, 30*time.Second)

	// Entities of shard 0 only: a shard the host does not own has none.
	var want []ResidentEntity
	for i := 0; len(want) < 6 && i < 200; i++ {
		for _, typ := range []string{"tally", "echo"} {
			id := fmt.Sprintf("e%d", i)
			if task.ShardOf(storage.DefaultGroup, 2, typ, id, "") != s0 {
				continue
			}
			if _, err := h.call(ctx, typ, id, `{"N":1}`); err != nil {
				t.Fatalf("call %s/%s: %v", typ, id, err)
			}
			want = append(want, ResidentEntity{Type: typ, ID: id})
		}
	}
	slices.SortFunc(want, func(a, b ResidentEntity) int {
		return cmp.Or(strings.Compare(a.Type, b.Type), strings.Compare(a.ID, b.ID))
	})
	got, owned, truncated := h.Resident(s0, 0)
	if !owned || truncated || !slices.Equal(got, want) {
		t.Fatalf("Resident(%s) = %v, owned %v, truncated %v; want %v", s0, got, owned, truncated, want)
	}
	if n := h.ResidentCount(); n != len(want) {
		t.Errorf("ResidentCount %d, want %d", n, len(want))
	}
	if got, owned, truncated := h.Resident(s0, 2); !owned || !truncated || !slices.Equal(got, want[:2]) {
		t.Errorf("Resident(%s, 2) = %v, %v, %v; want the first two, truncated", s0, got, owned, truncated)
	}
	if got, owned, _ := h.Resident(s1, 0); owned || got == nil || len(got) != 0 {
		t.Errorf("Resident of a shard not owned = %v, owned %v; want an empty list, not owned", got, owned)
	}
	b, _ := json.Marshal(want[0])
	if string(b) != fmt.Sprintf(`{"type":%q,"id":%q}`, want[0].Type, want[0].ID) {
		t.Errorf("JSON of a resident entity: %s", b)
	}

	if ops := h.Operations("tally"); !slices.Equal(ops, []string{"add", "get"}) {
		t.Errorf("Operations(tally) = %v, want [add get]", ops)
	}
	if ops := h.Operations("echo"); ops != nil {
		t.Errorf("Operations of a type without operations = %v, want nil", ops)
	}
	if ops := h.Operations("nope"); ops != nil {
		t.Errorf("Operations of an unknown type = %v, want nil", ops)
	}
	if a := h.Activity(); a.Messages != uint64(len(want)) {
		t.Errorf("Activity %+v: want %d messages served", a, len(want))
	}
}

// TestRemindersListed: Reminders lists an entity's pending reminders
// (name, operation, due time) from its shard's ready pointers, not those
// of another entity.
func TestRemindersListed(t *testing.T) {
	e, _, reg := alarmEnv(t)
	e.start("r1", reg)
	e.waitOwned(15 * time.Second)
	e.alarm("a1", alarmOp{Op: "arm", Name: "wake", AfterMS: 600_000, Msg: "later"})
	e.alarm("a2", alarmOp{Op: "arm", Name: "other", AfterMS: 600_000})
	shard := task.ShardOf(storage.DefaultGroup, e.Meta.Shards, "alarm", "a1", "")
	ctx := ctxFor(t, 30*time.Second)
	rs, err := Reminders(ctx, e.tasks, shard, "alarm", "a1")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Name != "wake" || rs[0].Op != "" || time.Until(rs[0].Due) < 5*time.Minute || rs[0].Ref == "" {
		t.Fatalf("reminders of a1: %+v; want the one named wake, due in about 10 minutes", rs)
	}
	if rs, err := Reminders(ctx, e.tasks, shard, "alarm", "nobody"); err != nil || len(rs) != 0 {
		t.Errorf("reminders of an entity without any: %+v, %v", rs, err)
	}
}

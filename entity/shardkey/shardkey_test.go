package shardkey

import (
	"fmt"
	"testing"
)

// TestOfIsTheStorageFormat pins the placement of a few entities and tasks
// and an entity's key: they are part of the storage format (a change would
// strand every stored task and state object on a shard its owner does not
// look at). The values were computed by the function as it shipped.
func TestOfIsTheStorageFormat(t *testing.T) {
	cases := []struct {
		typ, entity, id string
		of64, of4096    int
	}{
		{"counter", "c1", "", 7, 1863},
		{"echo", "e1", "", 31, 3871},
		{"job", "", "01a21a59-84e1-707c-b228-2e21622dbea9", 31, 2335},
		{"counter", "c1", "an id is ignored with an entity", 7, 1863},
	}
	for _, tc := range cases {
		for shards, want := range map[int]int{64: tc.of64, 4096: tc.of4096} {
			if got := Of("default", shards, tc.typ, tc.entity, tc.id); got.Group != "default" || got.Index != want {
				t.Errorf("Of(default, %d, %q, %q, %q) = %v, want default/%d", shards, tc.typ, tc.entity, tc.id, got, want)
			}
		}
	}
	if got := Of("g", 0, "counter", "c1", ""); got.Group != "g" || got.Index != 0 {
		t.Errorf("Of with 0 shards = %v, want g/0 (one shard)", got)
	}
	if got := Entity("counter", "c1"); got != "3441c51d3a898747" {
		t.Errorf("Entity(counter, c1) = %q, want 3441c51d3a898747", got)
	}
	if got := Entity("counter", ""); got != "" {
		t.Errorf("Entity without an id = %q, want empty", got)
	}
}

// TestEntityKeyFormat: the entity key is the hash in 16 lowercase hex
// digits, leading zeros kept (the storage format of mailbox keys, ready
// pointers and reminders), as fmt's %016x writes it.
func TestEntityKeyFormat(t *testing.T) {
	seenLeadingZero := false
	for i := range 5000 {
		typ, id := "counter", fmt.Sprintf("c%d", i)
		want := fmt.Sprintf("%016x", entityHash(typ, id))
		if got := Entity(typ, id); got != want {
			t.Fatalf("Entity(%q, %q) = %q, want %q", typ, id, got, want)
		}
		seenLeadingZero = seenLeadingZero || want[0] == '0'
	}
	if !seenLeadingZero {
		t.Fatal("no hash with a leading zero digit among 5000: the case is untested")
	}
	if Entity("counter", "") != "" {
		t.Fatal("an entity-less key is not empty")
	}
}

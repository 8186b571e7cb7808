package task

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/storage"
)

func TestKeys(t *testing.T) {
	s := storage.ShardID{Group: "default", Index: 7}
	if k := TaskKey(s, "abc"); k != "tasks/default/7/abc.json" {
		t.Fatalf("TaskKey = %q", k)
	}
	if k := PointerPrefix(s); k != "ready/default/7/" {
		t.Fatalf("PointerPrefix = %q", k)
	}
	at := time.Date(2026, 11, 22, 17, 5, 12, 123e6, time.FixedZone("CET", 3600))
	if k := PointerKey(s, at, "abc", "email", ""); k != "ready/default/7/20261122T160512.123Z_abc" {
		t.Fatalf("PointerKey without entity = %q (due must be UTC)", k)
	}
	if k := PointerKey(s, at, "abc", "cart", "user-42"); k != "ready/default/7/20261122T160512.123Z_abc.e069ab95eaf25af4" {
		t.Fatalf("PointerKey with entity = %q", k)
	}
	tk := &Task{ID: "abc", Type: "cart", Entity: "user-42", Shard: s, AvailableAt: at}
	if tk.PointerKey() != PointerKey(s, at, "abc", "cart", "user-42") || tk.Ref() != "default/7/abc" || tk.Key() != TaskKey(s, "abc") {
		t.Fatalf("task keys: %q %q %q", tk.PointerKey(), tk.Ref(), tk.Key())
	}
}

func TestPointerRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		shard := storage.ShardID{Group: []string{"default", "g.x-1", "A"}[i%3], Index: r.IntN(1024)}
		at := time.Unix(r.Int64N(300*365*86400)-50*365*86400, r.Int64N(1e9))
		entity := ""
		if i%2 == 0 {
			entity = "entity " + string(rune('α'+i%20))
		}
		tk := &Task{ID: NewID(), Type: "type-" + string(rune('a'+i%26)), Entity: entity, Shard: shard, AvailableAt: at}
		p, err := ParsePointer(tk.PointerKey())
		if err != nil {
			t.Fatalf("ParsePointer(%q): %v", tk.PointerKey(), err)
		}
		want := Pointer{Key: tk.PointerKey(), Shard: shard, Due: ceilMilli(at), ID: tk.ID, EntityKey: EntityKey(tk.Type, entity)}
		if !reflect.DeepEqual(p, want) {
			t.Fatalf("ParsePointer(%q) = %+v, want %+v", tk.PointerKey(), p, want)
		}
		if p.Ref() != tk.Ref() || p.TaskKey() != tk.Key() {
			t.Fatalf("pointer ref/key %q %q, want %q %q", p.Ref(), p.TaskKey(), tk.Ref(), tk.Key())
		}
		if p.Due.Before(at) || p.Due.Sub(at) >= time.Millisecond {
			t.Fatalf("due %s is not available_at %s rounded up to the millisecond", p.Due, at)
		}
	}
}

// TestDueOrder: due segments have one width and sort as their times do,
// across years, milliseconds and the clamped ends.
func TestDueOrder(t *testing.T) {
	base := time.Date(2026, 11, 22, 17, 5, 12, 123e6, time.UTC)
	times := []time.Time{
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), {}, // zero time is year 1
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(999, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC),
		base, base.Add(time.Millisecond), base.Add(time.Nanosecond), base.Add(999 * time.Microsecond),
		base.Add(-time.Millisecond), base.Add(time.Second), base.AddDate(1, 0, 0),
		time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC),
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		times = append(times, time.Date(1+r.IntN(9999), 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.Int64N(int64(365*24*time.Hour)))).Truncate(time.Millisecond))
	}
	for _, tm := range times {
		if d := FormatDue(tm); len(d) != DueWidth {
			t.Fatalf("FormatDue(%s) = %q, %d bytes, want %d", tm, d, len(d), DueWidth)
		}
	}
	byTime := slices.Clone(times)
	sort.SliceStable(byTime, func(i, j int) bool { return ceilMilli(byTime[i]).Before(ceilMilli(byTime[j])) })
	byKey := slices.Clone(times)
	sort.SliceStable(byKey, func(i, j int) bool { return FormatDue(byKey[i]) < FormatDue(byKey[j]) })
	for i := range byTime {
		if !ceilMilli(byTime[i]).Equal(ceilMilli(byKey[i])) {
			t.Fatalf("position %d: time order %s, key order %s", i, byTime[i], byKey[i])
		}
	}
	if FormatDue(base.Add(time.Nanosecond)) != FormatDue(base.Add(time.Millisecond)) {
		t.Fatal("a due 1ns past a millisecond must round up to the next one")
	}
	// Beyond the fixed width's range the due is clamped, never wider.
	if d := FormatDue(time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)); d != "99991231T235959.999Z" {
		t.Fatalf("FormatDue(year 12000) = %q", d)
	}
	if d := FormatDue(time.Unix(-1<<40, 0)); d != "00010101T000000.000Z" {
		t.Fatalf("FormatDue(before year 1) = %q", d)
	}
	for _, tm := range times[:13] {
		got, err := ParseDue(FormatDue(tm))
		if err != nil || !got.Equal(ceilMilli(tm)) {
			t.Fatalf("ParseDue(FormatDue(%s)) = %s, %v", tm, got, err)
		}
	}
}

func TestParsePointerRejects(t *testing.T) {
	bad := []string{
		"",
		"tasks/default/1/20261122T170512.123Z/abc",
		"ready/default/1/20261122T170512.123Z",
		"ready/default/1/20261122T170512.123Z_abc/extra",
		"ready/default/1/20261122T170512.123Z/abc",
		"ready//1/20261122T170512.123Z_abc",
		"ready/-bad/1/20261122T170512.123Z_abc",
		"ready/default/01/20261122T170512.123Z_abc",
		"ready/default/-1/20261122T170512.123Z_abc",
		"ready/default/x/20261122T170512.123Z_abc",
		"ready/default/1/20261122T170512.12Z_abc",
		"ready/default/1/20261122T170512Z_abc",
		"ready/default/1/20261322T170512.123Z_abc",
		"ready/default/1/20261122 170512.123Z_abc",
		"ready/default/1/20261122T170512.123Z_",
		"ready/default/1/20261122T170512.123Z_a b",
		"ready/default/1/20261122T170512.123Z_abc.",
		"ready/default/1/20261122T170512.123Z_abc.E069AB95EAF25AF4",
		"ready/default/1/20261122T170512.123Z_abc.e069ab95eaf25af",
		"ready/default/1/20261122T170512.123Z_abc.e069ab95eaf25af4.x",
	}
	for _, k := range bad {
		_, err := ParsePointer(k)
		var ke *KeyError
		if !errors.As(err, &ke) || !errors.Is(err, ErrMalformedKey) || ke.Key != k || !strings.Contains(err.Error(), `"`+k+`"`) {
			t.Errorf("ParsePointer(%q) = %v, want a *KeyError naming the key", k, err)
		}
	}
}

func TestParseRefAndTaskKey(t *testing.T) {
	s := storage.ShardID{Group: "g.1", Index: 42}
	id := NewID()
	gs, gid, err := ParseRef(Ref(s, id))
	if err != nil || gs != s || gid != id {
		t.Fatalf("ParseRef(Ref) = %v %q %v", gs, gid, err)
	}
	gs, gid, err = ParseTaskKey(TaskKey(s, id))
	if err != nil || gs != s || gid != id {
		t.Fatalf("ParseTaskKey(TaskKey) = %v %q %v", gs, gid, err)
	}
	for _, ref := range []string{"", "g/1", "g/1/a/b", "/1/a", "g/01/a", "g/1/a.b", "g/1/", "g/-1/a", "g/1/a b"} {
		_, _, err := ParseRef(ref)
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key != ref || ke.Kind != "task ref" {
			t.Errorf("ParseRef(%q) = %v, want a *KeyError naming it", ref, err)
		}
	}
	for _, key := range []string{"tasks/g/1/a", "tasks/g/1/a.json.json", "ready/g/1/a.json", "tasks/g/1/x/a.json", "tasks/g/1/.json"} {
		_, _, err := ParseTaskKey(key)
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key != key || ke.Kind != "task key" {
			t.Errorf("ParseTaskKey(%q) = %v, want a *KeyError naming it", key, err)
		}
	}
}

func TestValidateNames(t *testing.T) {
	long := strings.Repeat("a", MaxNameLength+1)
	for _, id := range []string{"a", "0192f7e4-6a1b-7c3d-8e5f-0123456789ab", "order:123_A-b", strings.Repeat("z", MaxNameLength)} {
		if err := ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q) = %v", id, err)
		}
		if err := ValidateType(id); err != nil {
			t.Errorf("ValidateType(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", long, "a/b", "a.b", "a b", "é", "a\x00", "a\n", "\xff"} {
		var ve *ValidationError
		if err := ValidateID(id); !errors.As(err, &ve) || ve.Field != "id" || !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateID(%q) = %v, want a *ValidationError on id", id, err)
		}
		if err := ValidateType(id); !errors.As(err, &ve) || ve.Field != "type" {
			t.Errorf("ValidateType(%q) = %v, want a *ValidationError on type", id, err)
		}
	}
	for _, e := range []string{"", "user-42", "ünïcødé / with.dots and spaces", strings.Repeat("é", MaxNameLength/2)} {
		if err := ValidateEntity(e); err != nil {
			t.Errorf("ValidateEntity(%q) = %v", e, err)
		}
	}
	for _, e := range []string{long, "a\nb", "a\x7f", "\xff\xfe", "a\u0085b"} {
		var ve *ValidationError
		if err := ValidateEntity(e); !errors.As(err, &ve) || ve.Field != "entity" {
			t.Errorf("ValidateEntity(%q) = %v, want a *ValidationError on entity", e, err)
		}
	}
}

func TestTaskJSON(t *testing.T) {
	tk := &Task{
		ID: "abc", Type: "cart", Entity: "user-42", Shard: storage.ShardID{Group: "default", Index: 7},
		Input: json.RawMessage(`{"a":1}`), Status: Running, Attempt: 2, MaxAttempts: 5,
		Timeout: Duration(5 * time.Minute), Retry: DefaultRetry(), AvailableAt: t0, CreatedAt: t0, UpdatedAt: t0.Add(time.Second),
		Claim: &Claim{RunnerID: "r", Epoch: 3, LeaseID: 4, LeaseExpiresAt: t0.Add(time.Minute), ClaimedAt: t0},
		Error: "boom", Trace: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Rev: 9,
		History:        []Transition{{At: t0, Event: EventSubmitted, Attempt: 0}},
		HistoryDropped: 3,
	}
	b, err := json.Marshal(tk)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"shard":"default/7"`, `"timeout":"5m0s"`, `"retry":{"initial":"1s","max":"5m0s","multiplier":2,"jitter":0.2}`,
		`"claim":{"runner_id":"r","epoch":3,"lease_id":4,`, `"available_at":"2026-11-22T17:05:12.123Z"`, `"rev":9`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
	var back Task
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if !reflect.DeepEqual(&back, tk) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, *tk)
	}
	// Durations decode from integer nanoseconds too; garbage is an error.
	var d Duration
	if err := json.Unmarshal([]byte(`1500000000`), &d); err != nil || d.Std() != 1500*time.Millisecond {
		t.Fatalf("Duration from nanoseconds: %v %v", d, err)
	}
	for _, bad := range []string{`"soon"`, `true`, `{}`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("Duration from %s: no error", bad)
		}
	}
	for _, bad := range []string{`{"id":"a"}`, `{"shard":"default"}`, `{"shard":"default/x"}`, `{"shard":7}`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("Task from %s: no error", bad)
		}
	}
}

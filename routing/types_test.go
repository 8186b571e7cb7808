package routing_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/routing"
	"github.com/tenurehq/tenure/storage"
)

// feed applies runner puts and deletes to a Table fed through Apply.
type feed struct {
	tbl *routing.Table
	rev int64
}

func newFeed(runners ...storage.RunnerInfo) *feed {
	f := &feed{tbl: routing.New(nil), rev: 1}
	f.list(runners...)
	return f
}

// list applies a listing of runners: the view a resync makes.
func (f *feed) list(runners ...storage.RunnerInfo) {
	f.rev++
	b := storage.MembershipBatch{Revision: f.rev, Listing: true}
	for _, r := range runners {
		b.Events = append(b.Events, storage.MembershipEvent{Runner: &storage.RunnerEvent{Kind: storage.EventPut, ID: r.ID, Runner: r, Revision: f.rev}})
	}
	f.tbl.Apply(b)
}

func (f *feed) put(r storage.RunnerInfo) {
	f.rev++
	f.tbl.Apply(storage.MembershipBatch{Revision: f.rev, Events: []storage.MembershipEvent{{Runner: &storage.RunnerEvent{
		Kind: storage.EventPut, ID: r.ID, Runner: r, Revision: f.rev}}}})
}

func (f *feed) del(id string) {
	f.rev++
	f.tbl.Apply(storage.MembershipBatch{Revision: f.rev, Events: []storage.MembershipEvent{{Runner: &storage.RunnerEvent{
		Kind: storage.EventDelete, ID: id, Revision: f.rev}}}})
}

func typed(id string, groups []string, types ...string) storage.RunnerInfo {
	return storage.RunnerInfo{ID: id, Weight: 1, Groups: groups, Types: types}
}

// expectPlace checks PlaceType(typ, prefer).
func expectPlace(t *testing.T, tbl *routing.Table, typ, prefer, group string, h routing.Hosting) {
	t.Helper()
	g, got := tbl.PlaceType(typ, prefer)
	if g != group || got != h {
		t.Fatalf("PlaceType(%q, %q) = %q, %s; want %q, %s", typ, prefer, g, got, group, h)
	}
	if g, ok := tbl.GroupOf(typ, prefer); ok != (h == routing.Hosted) || g != group {
		t.Fatalf("GroupOf(%q, %q) = %q, %v; want %q, %v", typ, prefer, g, ok, group, h == routing.Hosted)
	}
}

// TestPlaceType follows the index through the changes a view goes
// through: runners joining, changing their types, leaving, a listing; the
// group a type is placed in, and the choice among several.
func TestPlaceType(t *testing.T) {
	f := newFeed()
	// No runner yet: nothing is known.
	expectPlace(t, f.tbl, "cart", "default", "default", routing.HostingUnknown)

	f.put(typed("a", []string{"default"}, "cart", "order"))
	f.put(typed("b", []string{"billing"}, "invoice"))
	expectPlace(t, f.tbl, "cart", "default", "default", routing.Hosted)
	expectPlace(t, f.tbl, "invoice", "default", "billing", routing.Hosted)
	expectPlace(t, f.tbl, "ghost", "default", "default", routing.NotHosted)

	// Two groups host it: the caller's own wins, else the lexically first.
	f.put(typed("c", []string{"zeta"}, "invoice"))
	expectPlace(t, f.tbl, "invoice", "zeta", "zeta", routing.Hosted)
	expectPlace(t, f.tbl, "invoice", "default", "billing", routing.Hosted)
	if got := f.tbl.HostGroups("invoice"); !slices.Equal(got, []string{"billing", "zeta"}) {
		t.Fatalf("HostGroups(invoice) = %q; want [billing zeta]", got)
	}

	// A runner serving every group hosts its types in the caller's group.
	f.put(typed("d", nil, "audit"))
	expectPlace(t, f.tbl, "audit", "default", "default", routing.Hosted)
	expectPlace(t, f.tbl, "audit", "billing", "billing", routing.Hosted)
	if got := f.tbl.HostGroups("audit"); !slices.Equal(got, []string{"*"}) {
		t.Fatalf("HostGroups(audit) = %q; want [*]", got)
	}

	// An older runner, listing no types, may host anything: a type no
	// typed runner lists falls back to the caller's group.
	f.put(storage.RunnerInfo{ID: "old", Weight: 1, Groups: []string{"default"}})
	expectPlace(t, f.tbl, "ghost", "default", "default", routing.HostingUnknown)
	expectPlace(t, f.tbl, "invoice", "default", "billing", routing.Hosted)
	f.del("old")
	expectPlace(t, f.tbl, "ghost", "default", "default", routing.NotHosted)

	// A runner that stops hosting a type: the other group keeps it.
	f.put(typed("b", []string{"billing"}, "payment"))
	expectPlace(t, f.tbl, "invoice", "default", "zeta", routing.Hosted)
	expectPlace(t, f.tbl, "payment", "default", "billing", routing.Hosted)

	// Every host of a type leaves (a restart of the group): the type
	// stays where it was, so that callers wait for its holder there.
	f.del("c")
	if got := f.tbl.HostGroups("invoice"); len(got) != 0 {
		t.Fatalf("HostGroups(invoice) after its hosts left = %q; want none", got)
	}
	expectPlace(t, f.tbl, "invoice", "default", "zeta", routing.Hosted)
	// It comes back elsewhere: the new hosts say where it lives.
	f.put(typed("e", []string{"omega"}, "invoice"))
	expectPlace(t, f.tbl, "invoice", "default", "omega", routing.Hosted)

	// A listing (a resync) rebuilds the index from the records.
	f.list(typed("a", []string{"default"}, "order"), typed("e", []string{"omega"}, "invoice"))
	expectPlace(t, f.tbl, "cart", "default", "default", routing.Hosted) // remembered
	expectPlace(t, f.tbl, "order", "billing", "default", routing.Hosted)
	expectPlace(t, f.tbl, "payment", "default", "billing", routing.Hosted) // remembered
	if got := f.tbl.HostGroups("payment"); len(got) != 0 {
		t.Fatalf("HostGroups(payment) after the listing = %q; want none", got)
	}
	expectPlace(t, f.tbl, "ghost", "default", "default", routing.NotHosted)

	// An undecodable record counts as absent, its types with it.
	f.rev++
	f.tbl.Apply(storage.MembershipBatch{Revision: f.rev, Events: []storage.MembershipEvent{{Runner: &storage.RunnerEvent{
		Kind: storage.EventPut, ID: "e", Err: storage.ErrCorrupt, Revision: f.rev}}}})
	if got := f.tbl.HostGroups("invoice"); len(got) != 0 {
		t.Fatalf("HostGroups(invoice) after its record turned undecodable = %q; want none", got)
	}
}

// TestPlaceTypeFromEtcd: runners registered in etcd with the types they
// host, in two groups, as a Table fed by the real membership stream sees
// them; a runner whose record lists no types keeps the old behaviour.
func TestPlaceTypeFromEtcd(t *testing.T) {
	testenv.CheckLeaks(t)
	st := openStore(t, testenv.SharedEtcd(t).Endpoint(), testenv.Prefix(t))
	tbl, _ := startTable(t, st)

	registerInfo(t, st, typed("a", []string{"default"}, "cart"))
	registerInfo(t, st, typed("b", []string{"billing"}, "invoice"))
	testenv.WaitFor(t, "both runners' types in the table", 10*time.Second, func() bool {
		return len(tbl.HostGroups("cart")) == 1 && len(tbl.HostGroups("invoice")) == 1
	})
	expectPlace(t, tbl, "invoice", "default", "billing", routing.Hosted)
	expectPlace(t, tbl, "cart", "default", "default", routing.Hosted)
	expectPlace(t, tbl, "ghost", "default", "default", routing.NotHosted)

	old := registerInfo(t, st, storage.RunnerInfo{ID: "old", Weight: 1, Groups: []string{"billing"}})
	testenv.WaitFor(t, "the untyped runner in the table", 10*time.Second, func() bool {
		_, h := tbl.PlaceType("ghost", "default")
		return h == routing.HostingUnknown
	})
	expectPlace(t, tbl, "invoice", "default", "billing", routing.Hosted)
	if err := old.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the untyped runner gone from the table", 10*time.Second, func() bool {
		_, h := tbl.PlaceType("ghost", "default")
		return h == routing.NotHosted
	})
}

// registerInfo registers r and keeps its lease alive until the test ends.
func registerInfo(t *testing.T, st storage.Registrar, r storage.RunnerInfo) storage.Session {
	t.Helper()
	ss, err := st.Register(ctxT(t), r, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	keepAlive(t, ss)
	return ss
}

// TestTypeGaps: a group's runners that lack types others of the group
// list; runners of other groups and untyped runners do not count.
func TestTypeGaps(t *testing.T) {
	runners := []storage.RunnerInfo{
		typed("a", []string{"default"}, "cart", "order"),
		typed("b", []string{"default"}, "cart"),
		typed("c", []string{"default", "billing"}, "cart", "order", "refund"),
		typed("d", []string{"billing"}, "invoice"), // another group
		typed("e", nil, "cart", "order", "refund"), // every group
		{ID: "old", Weight: 1, Groups: []string{"default"}},
	}
	got := routing.TypeGaps("default", runners)
	want := []routing.TypeGap{{Runner: "a", Missing: []string{"refund"}}, {Runner: "b", Missing: []string{"order", "refund"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("TypeGaps(default) = %+v; want %+v", got, want)
	}
	if got := routing.TypeGaps("default", runners[2:3]); got != nil {
		t.Fatalf("TypeGaps of one runner = %+v; want none", got)
	}
	f := newFeed(runners...)
	if got := f.tbl.TypeGaps("default"); !reflect.DeepEqual(got, want) {
		t.Fatalf("Table.TypeGaps(default) = %+v; want %+v", got, want)
	}
	wantBilling := []routing.TypeGap{
		{Runner: "c", Missing: []string{"invoice"}},
		{Runner: "d", Missing: []string{"cart", "order", "refund"}},
		{Runner: "e", Missing: []string{"invoice"}},
	}
	if got := f.tbl.TypeGaps("billing"); !reflect.DeepEqual(got, wantBilling) {
		t.Fatalf("Table.TypeGaps(billing) = %+v; want %+v", got, wantBilling)
	}
}

// BenchmarkPlaceType is the cost a call pays to place its type: 64
// runners in 4 groups, 16 types each.
func BenchmarkPlaceType(b *testing.B) {
	var runners []storage.RunnerInfo
	for i := range 64 {
		g := fmt.Sprintf("g%d", i%4)
		var types []string
		for j := range 16 {
			types = append(types, fmt.Sprintf("%s-type%d", g, j))
		}
		runners = append(runners, typed(fmt.Sprintf("r%d", i), []string{g}, types...))
	}
	tbl := newFeed(runners...).tbl
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, h := tbl.PlaceType("g2-type7", "g0"); h != routing.Hosted {
				b.Fatal(h)
			}
		}
	})
}

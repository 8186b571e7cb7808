package entity

import (
	"testing"

	"github.com/tenurehq/tenure/storage"
)

// TestDoubts walks the registry through the cases that decide whether an
// activation refences: a write in flight, an unknown outcome, what
// settles one, and a newer epoch. Nothing is dropped when an ownership ends:
// its epoch may return (see doubts).
func TestDoubts(t *testing.T) {
	s0 := storage.ShardID{Group: storage.DefaultGroup, Index: 0}
	s1 := storage.ShardID{Group: storage.DefaultGroup, Index: 1}
	var d doubts
	want := func(what string, shard storage.ShardID, epoch int64, key string, v bool) {
		t.Helper()
		if got := d.doubted(shard, epoch, key); got != v {
			t.Fatalf("%s: doubted(%s, %d, %s) = %v, want %v", what, shard, epoch, key, got, v)
		}
	}

	want("nothing written", s0, 5, "a", false)
	d.begin(s0, 5, "a")
	want("a write in flight", s0, 5, "a", true)
	want("another key", s0, 5, "b", false)
	want("another shard", s1, 5, "a", false)
	d.end(s0, 5, "a", writeLanded)
	want("the write landed", s0, 5, "a", false)

	d.begin(s0, 5, "a")
	d.end(s0, 5, "a", writeRefused)
	want("the write was refused", s0, 5, "a", false)

	d.begin(s0, 5, "a")
	d.end(s0, 5, "a", writeUnknown)
	want("an unknown outcome", s0, 5, "a", true)
	d.begin(s0, 5, "a")
	d.end(s0, 5, "a", writeRefused)
	want("an unknown outcome, then a refusal", s0, 5, "a", true)
	d.begin(s0, 5, "a")
	d.end(s0, 5, "a", writeLanded)
	want("an unknown outcome, then a landed write", s0, 5, "a", false)

	d.begin(s0, 5, "a")
	d.end(s0, 5, "a", writeUnknown)
	d.begin(s0, 5, "a") // the ended ownership's write, still in flight
	d.refenced(s0, 5, "a")
	want("a refence while a write is in flight", s0, 5, "a", true)
	d.end(s0, 5, "a", writeUnknown)
	want("that write ended unknown after the refence", s0, 5, "a", true)
	d.refenced(s0, 5, "a")
	want("refenced again", s0, 5, "a", false)
	if n := d.len(); n != 0 {
		t.Fatalf("%d keys kept with nothing in doubt", n)
	}

	d.begin(s0, 5, "a")
	d.end(s0, 5, "a", writeUnknown)
	want("the newer epoch's view", s0, 6, "a", false)
	d.begin(s0, 6, "b")
	want("epoch 5's doubt once epoch 6 wrote", s0, 5, "a", false)
	d.begin(s0, 5, "a")
	d.end(s0, 5, "a", writeUnknown)
	want("epoch 5's late write, recorded after epoch 6's", s0, 5, "a", false)
	d.end(s0, 6, "b", writeUnknown)
	want("epoch 6's doubt", s0, 6, "b", true)
	d.begin(s0, 6, "b")
	d.end(s0, 6, "b", writeLanded)
	want("epoch 6's doubt settled by a landed write", s0, 6, "b", false)
	if n := d.len(); n != 0 {
		t.Fatalf("%d keys kept with nothing in doubt", n)
	}
}

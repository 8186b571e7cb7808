package task

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestShardOfGolden pins the placement function: it is part of the storage
// format, so a change would strand every stored task on the wrong shard.
func TestShardOfGolden(t *testing.T) {
	// XXH64("abc", seed 0) from the reference implementation: the hash
	// itself is the one the format names.
	if got := xxhash.Sum64String("abc"); got != 0x44bc2cf5ad770999 {
		t.Fatalf("xxhash64(abc) = %016x, want 44bc2cf5ad770999", got)
	}
	cases := []struct {
		typ, entity, id string
		idx64, idx256   int
		ekey            string
	}{
		{"email", "", "0192f7e4-6a1b-7c3d-8e5f-0123456789ab", 47, 47, ""},
		{"email", "", "order-1", 45, 173, ""},
		{"cart", "user-42", "x", 52, 244, "e069ab95eaf25af4"},
		{"cart", "user-42", "y", 52, 244, "e069ab95eaf25af4"},
		{"cart", "ünïcødé entity/with.dots", "z", 12, 76, "32ca914c39f6bd4c"},
	}
	for _, c := range cases {
		if s := ShardOf("default", 64, c.typ, c.entity, c.id); s.Group != "default" || s.Index != c.idx64 {
			t.Errorf("ShardOf(default, 64, %q, %q, %q) = %v, want default/%d", c.typ, c.entity, c.id, s, c.idx64)
		}
		if s := ShardOf("g", 256, c.typ, c.entity, c.id); s.Index != c.idx256 {
			t.Errorf("ShardOf(g, 256, %q, %q, %q) = %v, want g/%d", c.typ, c.entity, c.id, s, c.idx256)
		}
		if k := EntityKey(c.typ, c.entity); k != c.ekey {
			t.Errorf("EntityKey(%q, %q) = %q, want %q", c.typ, c.entity, k, c.ekey)
		}
	}
}

// TestShardOfDefinition checks ShardOf and EntityKey against their
// documented definition, built independently.
func TestShardOfDefinition(t *testing.T) {
	for i := range 200 {
		typ, entity, id := "t"+strconv.Itoa(i%7), "", "id-"+strconv.Itoa(i)
		if i%2 == 0 {
			entity = "e" + strconv.Itoa(i)
		}
		var h uint64
		if entity != "" {
			h = xxhash.Sum64String(typ + "\x00" + entity)
			if want := fmt.Sprintf("%016x", h); EntityKey(typ, entity) != want {
				t.Fatalf("EntityKey(%q, %q) = %q, want %q", typ, entity, EntityKey(typ, entity), want)
			}
		} else {
			h = xxhash.Sum64String(id)
		}
		if s := ShardOf("g", 13, typ, entity, id); s.Index != int(h%13) {
			t.Fatalf("ShardOf(%q, %q, %q) = %d, want %d", typ, entity, id, s.Index, h%13)
		}
	}
	// The type separates entities: the same entity id under two types is
	// two entities, and the NUL keeps ("ab", "c") apart from ("a", "bc").
	if EntityKey("ab", "c") == EntityKey("a", "bc") || EntityKey("a", "x") == EntityKey("b", "x") {
		t.Fatal("EntityKey does not separate type from entity")
	}
	if EntityKey("a", "") != "" {
		t.Fatal("EntityKey of no entity must be empty")
	}
	if s := ShardOf("g", 0, "t", "", "x"); s.Index != 0 {
		t.Fatalf("ShardOf with 0 shards = %v, want index 0", s)
	}
}

// TestShardOfEntityAffinity: every task of an entity lands on one shard,
// whatever its id.
func TestShardOfEntityAffinity(t *testing.T) {
	want := ShardOf("g", 64, "cart", "user-7", NewID())
	for range 100 {
		if s := ShardOf("g", 64, "cart", "user-7", NewID()); s != want {
			t.Fatalf("entity task landed on %v, want %v", s, want)
		}
	}
}

// TestShardOfDistribution: ids and entities spread evenly over the shards
// (a chi-squared test far from its critical value).
func TestShardOfDistribution(t *testing.T) {
	const shards, n = 64, 64000
	for _, kind := range []string{"ids", "entities"} {
		counts := make([]int, shards)
		for i := range n {
			if kind == "ids" {
				counts[ShardOf("g", shards, "t", "", NewID()).Index]++
			} else {
				counts[ShardOf("g", shards, "t", "user-"+strconv.Itoa(i), "x").Index]++
			}
		}
		exp := float64(n) / shards
		chi2 := 0.0
		for _, c := range counts {
			chi2 += math.Pow(float64(c)-exp, 2) / exp
		}
		// 63 degrees of freedom: the 99.99th percentile is about 120.
		if chi2 > 120 {
			t.Errorf("%s: chi² = %.1f over %d shards, counts %v", kind, chi2, shards, counts)
		}
	}
}

package placement

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestHashGolden pins the hashed bytes, the hash and the mapping to u: any
// change here changes owners and must come with a new HashName.
func TestHashGolden(t *testing.T) {
	if got := string(appendKey(nil, "default", 17)) + "runner-a"; got != "default/17/runner-a" {
		t.Fatalf("hashed bytes = %q, want %q", got, "default/17/runner-a")
	}
	cases := []struct {
		group string
		shard int
		id    string
		hash  uint64
		u     uint64 // bits of u
		score uint64 // bits of rendezvousScore(1, hash)
	}{
		// Cross-checked against an independent implementation of the
		// specification (XXH64 and e_log written from scratch).
		{"default", 0, "runner-a", 0x335133c688e5f923, 0x3fc9a899e34472fc, 0x3fe3e937877f373f},
		{"default", 17, "runner-a", 0x891aa1303c6b449e, 0x3fe1235426078d69, 0x3ff99f80d9db1d2a},
		{"jobs", 255, "runner-b", 0x477d17c9cce36f07, 0x3fd1df45f27338da, 0x3fe915e1621e1ded},
	}
	for _, c := range cases {
		h := hashKey(c.group, c.shard, c.id)
		u := unitOf(h)
		s := rendezvousScore(1, h)
		if h != c.hash || math.Float64bits(u) != c.u || math.Float64bits(s) != c.score {
			t.Errorf("%s/%d/%s: hash %#x u %#x score %#x, want %#x %#x %#x", c.group, c.shard, c.id,
				h, math.Float64bits(u), math.Float64bits(s), c.hash, c.u, c.score)
		}
	}
}

// TestUnitOpenInterval proves u never reaches 0 or 1, so the score is always
// finite and positive.
func TestUnitOpenInterval(t *testing.T) {
	lo, hi := unitOf(0), unitOf(math.MaxUint64)
	if lo != 0x1p-53 || hi != 1-0x1p-53 {
		t.Fatalf("unitOf range = [%g, %g], want [2^-53, 1-2^-53]", lo, hi)
	}
	for _, h := range []uint64{0, 1, 1 << 12, math.MaxUint64 - 1, math.MaxUint64} {
		s := rendezvousScore(1, h)
		if !(s > 0) || math.IsInf(s, 0) {
			t.Fatalf("rendezvousScore(1, %#x) = %g, want finite > 0", h, s)
		}
	}
}

// TestLnMatchesMathLog checks the portable logarithm against the standard
// library: within one ulp everywhere assignment uses it, and exact on powers
// of two.
func TestLnMatchesMathLog(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(x float64) {
		got, want := portableLn(x), math.Log(x)
		if got == want {
			return
		}
		if ulps := math.Abs(got-want) / (math.Nextafter(math.Abs(want), math.Inf(1)) - math.Abs(want)); ulps > 1 {
			t.Fatalf("portableLn(%v) = %v, math.Log = %v (%.1f ulp apart)", x, got, want, ulps)
		}
	}
	for range 200000 {
		check(unitOf(rng.Uint64()))
		check(rng.Float64()*1000 + 1e-300)
	}
	for e := -53; e <= 0; e++ {
		x := math.Ldexp(1, e)
		if got, want := portableLn(x), float64(e)*math.Ln2; math.Abs(got-want) > 1e-15*math.Abs(want) {
			t.Fatalf("portableLn(2^%d) = %v, want %v", e, got, want)
		}
	}
}

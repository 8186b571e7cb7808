package placement

import (
	"math"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// This file holds the scoring half of the assignment specification at the
// top of assign.go: the hashed bytes, the mapping of a hash to u, and a
// natural logarithm whose result is the same on every platform.

// appendKey appends the hashed byte string "<group>/<shard>/" to buf; the
// runner id follows it. The shard index is decimal, without sign or padding.
func appendKey(buf []byte, group string, shard int) []byte {
	buf = append(buf, group...)
	buf = append(buf, '/')
	buf = strconv.AppendInt(buf, int64(shard), 10)
	return append(buf, '/')
}

// hashKey is XXH64 with seed 0 of "<group>/<shard>/<runner-id>".
func hashKey(group string, shard int, runnerID string) uint64 {
	buf := appendKey(make([]byte, 0, 64), group, shard)
	return hashBytes(append(buf, runnerID...))
}

// hashBytes is XXH64 with seed 0.
func hashBytes(b []byte) uint64 { return xxhash.Sum64(b) }

// unitOf maps a hash to u in the open interval (0, 1). It keeps 52 bits, not
// 53, so that (m + 0.5) is exact in binary64: with 53 bits the largest m
// rounds up to 2^53 and u would be exactly 1, whose logarithm is 0.
func unitOf(h uint64) float64 {
	return (float64(h>>12) + 0.5) * 0x1p-52
}

// rendezvousScore is the score of a runner of (normalised) weight w for the
// hash h: w / -ln(u). Higher wins. It is finite and positive: u ≤ 1 - 2^-53,
// so -ln(u) ≥ 2^-53.
func rendezvousScore(w float64, h uint64) float64 { return w / -portableLn(unitOf(h)) }

// costBound returns a lower bound of 1/rendezvousScore(w, h) = -ln(u)/w that
// needs neither a logarithm nor a division (invW is 1/w), as a float32 to
// halve the memory of a group's bounds. For u in (0, 1), -ln(u) > 1 - u;
// 1 - u is computed exactly from the hash, and the factor 1 - 2^-22 keeps
// the product a lower bound after rounding to float32 (relative error
// ≤ 2^-24), without a branch. boundBelow tells when the bound proves a score
// lower than a given one. The bound is tight where it matters: a shard's
// best scores come from u close to 1, where -ln(u) exceeds 1 - u by a factor
// of about 1 + (1-u)/2.
func costBound(invW float64, h uint64) float32 {
	m := int64(h >> 12)                             // int64 converts to float64 faster than uint64
	oneMinusU := (float64(1<<52-m) - 0.5) * 0x1p-52 // exact: 1 - (m + 0.5) × 2^-52
	return float32(oneMinusU * invW * (1 - 0x1p-22))
}

// boundBelow reports whether a pair whose cost bound is c surely scores
// less than s. The true score is at most 1/c; the margin 2^-40 exceeds the
// rounding of the score, the bound and this product (a few units of 2^-53,
// relative), so a pair that might tie or win is never skipped.
func boundBelow(c float32, s float64) bool { return float64(c)*s > 1+0x1p-40 }

// portableLn is the natural logarithm of a positive, finite, normal x,
// computed with the algorithm of fdlibm's e_log.c (as in Go's pure-Go
// math.Log) in IEEE-754 binary64 with every operation rounded on its own.
// The method and the coefficients come from FreeBSD's lib/msun/src/e_log.c,
// which carries this notice:
//
//	Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
//	Developed at SunPro, a Sun Microsystems, Inc. business.
//	Permission to use, copy, modify, and distribute this
//	software is freely granted, provided that this notice
//	is preserved.
//
// math.Log is not used because Go implements it in assembly on amd64 and in
// Go elsewhere, and the compiler may fuse a*b+c into one FMA instruction on
// arm64 and others: different runners could then compute different last
// bits and, on a near-tie, a different owner. The explicit float64
// conversions below forbid fusion (Go spec, "Floating-point operators"), so
// the result is bit-for-bit identical on every platform.
func portableLn(x float64) float64 {
	const (
		ln2Hi = 6.93147180369123816490e-01 // 3fe62e42 fee00000
		ln2Lo = 1.90821492927058770002e-10 // 3dea39ef 35793c76
		lg1   = 6.666666666666735130e-01   // 3fe55555 55555593
		lg2   = 3.999999999940941908e-01   // 3fd99999 9997fa04
		lg3   = 2.857142874366239149e-01   // 3fd24924 94229359
		lg4   = 2.222219843214978396e-01   // 3fcc71c5 1d8e78af
		lg5   = 1.818357216161805012e-01   // 3fc74664 96cb03de
		lg6   = 1.531383769920937332e-01   // 3fc39a09 d078c69f
		lg7   = 1.479819860511658591e-01   // 3fc2f112 df3e5244
	)
	// x = f1 × 2^k with f1 in [√2/2, √2): exact bit manipulation.
	f1, ki := math.Frexp(x)
	if f1 < math.Sqrt2/2 {
		f1 *= 2
		ki--
	}
	f := f1 - 1
	k := float64(ki)

	s := f / (2 + f)
	s2 := float64(s * s)
	s4 := float64(s2 * s2)
	t1 := float64(s2 * (lg1 + float64(s4*(lg3+float64(s4*(lg5+float64(s4*lg7)))))))
	t2 := float64(s4 * (lg2 + float64(s4*(lg4+float64(s4*lg6)))))
	r := t1 + t2
	hfsq := float64(float64(0.5*f) * f)
	return float64(k*ln2Hi) - ((hfsq - (float64(s*(hfsq+r)) + float64(k*ln2Lo))) - f)
}

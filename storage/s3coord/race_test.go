//go:build race

package s3coord_test

// raceSlowdown scales the watch delay the suite holds VersityGW to: the
// gateway runs inside the test binary, so the race detector slows every
// request it serves several times over, and a handoff is four requests in
// a row.
const raceSlowdown = 4

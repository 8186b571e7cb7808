//go:build !race

package s3coord_test

// raceSlowdown: see race_test.go.
const raceSlowdown = 1

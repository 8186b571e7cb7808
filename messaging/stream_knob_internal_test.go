package messaging

import (
	"os"
	"strconv"
)

// TENURE_TEST_STREAMS_PER_CONN sets streamsPerConn in this package's
// tests and benchmarks, to measure how many streams a connection needs at
// a core count (go test -bench CallRemote -cpu 16).
func init() {
	if n, err := strconv.Atoi(os.Getenv("TENURE_TEST_STREAMS_PER_CONN")); err == nil && n > 0 {
		streamsPerConn = n
	}
}

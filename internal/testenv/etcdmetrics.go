package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/etcdcalls"
)

// EtcdCalls is etcd's own count of the gRPC calls it served, by method; see
// etcdcalls.Calls.
//
// The embedded etcd registers its gRPC metrics once per process on the
// default registry, so the counts are the sum over every embedded server
// of the test binary: a test that counts must have no other etcd traffic
// running alongside (no parallel tests), and counts the difference between
// two snapshots (Since).
type EtcdCalls = etcdcalls.Calls

// EtcdMethodCalls is the count of one gRPC method; see etcdcalls.MethodCalls.
type EtcdMethodCalls = etcdcalls.MethodCalls

// EtcdCallsNow snapshots etcd's gRPC server counters.
func EtcdCallsNow(t testing.TB) EtcdCalls {
	t.Helper()
	c, err := etcdcalls.Now(prometheus.DefaultGatherer)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return c
}

package testenv

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// EtcdCalls is etcd's own count of the gRPC calls it served, by method
// (Range, Txn, LeaseKeepAlive, Watch…), read from the server's Prometheus
// counters (grpc_server_started_total, grpc_server_msg_received_total):
// what etcd saw, not what a client believes it sent.
//
// The embedded etcd registers its gRPC metrics once per process on the
// default registry, so the counts are the sum over every embedded server
// of the test binary: a test that counts must have no other etcd traffic
// running alongside (no parallel tests), and counts the difference between
// two snapshots (Since).
type EtcdCalls map[string]EtcdMethodCalls

// EtcdMethodCalls is the count of one gRPC method.
type EtcdMethodCalls struct {
	// Stream: the method is a stream (a keep-alive or watch stream), not a
	// unary call.
	Stream bool
	// Started counts calls started: one per unary request, one per stream
	// opened.
	Started float64
	// Received counts the server's reads of client messages: one per unary
	// request; on a stream one per message (a keep-alive, a watch create)
	// plus the read that finds the stream's end.
	Received float64
}

// Requests is the method's client requests: a unary call is one; on a
// stream each message is one, whether or not the stream was opened for it
// (each stream's end-of-stream read is taken off, so a keep-alive on a
// fresh stream counts one as it does on a reused one). A stream still open
// at the second snapshot is short of its end read, so the figure is within
// one per stream opened.
func (m EtcdMethodCalls) Requests() float64 {
	if !m.Stream {
		return m.Started
	}
	return max(m.Received-m.Started, 0)
}

// EtcdCallsNow snapshots etcd's gRPC server counters.
func EtcdCallsNow(t testing.TB) EtcdCalls {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("testenv: gather etcd metrics: %v", err)
	}
	c := EtcdCalls{}
	found := false
	for _, mf := range mfs {
		name := mf.GetName()
		if name != "grpc_server_started_total" && name != "grpc_server_msg_received_total" {
			continue
		}
		found = true
		for _, m := range mf.GetMetric() {
			var method, typ string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "grpc_method":
					method = l.GetValue()
				case "grpc_type":
					typ = l.GetValue()
				}
			}
			mc := c[method]
			mc.Stream = typ != "unary"
			if name == "grpc_server_started_total" {
				mc.Started += m.GetCounter().GetValue()
			} else {
				mc.Received += m.GetCounter().GetValue()
			}
			c[method] = mc
		}
	}
	if !found {
		t.Fatal("testenv: no etcd gRPC server metrics on the default registry (no embedded etcd started?)")
	}
	return c
}

// Since returns the calls counted after earlier was taken.
func (c EtcdCalls) Since(earlier EtcdCalls) EtcdCalls {
	out := EtcdCalls{}
	for k, now := range c {
		then := earlier[k]
		d := EtcdMethodCalls{Stream: now.Stream, Started: now.Started - then.Started, Received: now.Received - then.Received}
		if d.Started != 0 || d.Received != 0 {
			out[k] = d
		}
	}
	return out
}

// Requests is the client requests of every method (see
// EtcdMethodCalls.Requests).
func (c EtcdCalls) Requests() float64 {
	var n float64
	for _, m := range c {
		n += m.Requests()
	}
	return n
}

// String lists the counts by method, for logs.
func (c EtcdCalls) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c)) {
		m := c[k]
		if m.Stream {
			fmt.Fprintf(&b, "%s: %g requests on %g streams opened; ", k, m.Requests(), m.Started)
		} else {
			fmt.Fprintf(&b, "%s: %g; ", k, m.Started)
		}
	}
	return strings.TrimSuffix(b.String(), "; ")
}

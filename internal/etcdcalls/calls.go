package etcdcalls

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Calls is etcd's own count of the gRPC calls it served, by method
// (Range, Txn, LeaseKeepAlive, Watch…), read from the server's Prometheus
// counters (grpc_server_started_total, grpc_server_msg_received_total):
// what etcd saw, not what a client believes it sent.
//
// An embedded etcd registers its gRPC metrics once per process on the
// default registry, so the counts are the sum over every embedded server
// of the process and every client of them: count the difference between
// two snapshots (Since) while nothing else talks to etcd.
type Calls map[string]MethodCalls

// MethodCalls is the count of one gRPC method.
type MethodCalls struct {
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
func (m MethodCalls) Requests() float64 {
	if !m.Stream {
		return m.Started
	}
	return max(m.Received-m.Started, 0)
}

// Now snapshots etcd's gRPC server counters from g (an embedded server
// registers them on prometheus.DefaultGatherer).
func Now(g prometheus.Gatherer) (Calls, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("etcdcalls: gather etcd metrics: %w", err)
	}
	c := Calls{}
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
		return nil, ErrNoMetrics
	}
	return c, nil
}

// ErrNoMetrics says the gatherer holds no etcd gRPC server metrics: no
// embedded etcd server was started in this process.
var ErrNoMetrics = errors.New("etcdcalls: no etcd gRPC server metrics (no embedded etcd started in this process?)")

// Since returns the calls counted after earlier was taken.
func (c Calls) Since(earlier Calls) Calls {
	out := Calls{}
	for k, now := range c {
		then := earlier[k]
		d := MethodCalls{Stream: now.Stream, Started: now.Started - then.Started, Received: now.Received - then.Received}
		if d.Started != 0 || d.Received != 0 {
			out[k] = d
		}
	}
	return out
}

// Requests is the client requests of every method (see
// MethodCalls.Requests).
func (c Calls) Requests() float64 {
	var n float64
	for _, m := range c {
		n += m.Requests()
	}
	return n
}

// String lists the counts by method, for logs.
func (c Calls) String() string {
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

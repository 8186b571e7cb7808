package etcdcalls

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestNowSinceRequests reads counters shaped like etcd's gRPC server
// metrics: a unary method counts its calls, a stream its messages less
// one end-of-stream read per stream opened.
func TestNowSinceRequests(t *testing.T) {
	reg := prometheus.NewRegistry()
	labels := []string{"grpc_method", "grpc_type", "grpc_service"}
	started := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_started_total"}, labels)
	received := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_msg_received_total"}, labels)
	reg.MustRegister(started, received)
	if _, err := Now(reg); !errors.Is(err, ErrNoMetrics) {
		t.Fatalf("no metrics yet: got %v, want ErrNoMetrics", err)
	}
	started.WithLabelValues("Range", "unary", "etcdserverpb.KV").Add(2)
	received.WithLabelValues("Range", "unary", "etcdserverpb.KV").Add(2)
	started.WithLabelValues("LeaseKeepAlive", "bidi_stream", "etcdserverpb.Lease").Add(1)
	received.WithLabelValues("LeaseKeepAlive", "bidi_stream", "etcdserverpb.Lease").Add(3)
	before, err := Now(reg)
	if err != nil {
		t.Fatal(err)
	}
	started.WithLabelValues("Range", "unary", "etcdserverpb.KV").Add(5)
	received.WithLabelValues("Range", "unary", "etcdserverpb.KV").Add(5)
	// The open stream carries 4 more keep-alives; a second stream opens,
	// carries 2 and ends (its end read).
	started.WithLabelValues("LeaseKeepAlive", "bidi_stream", "etcdserverpb.Lease").Add(1)
	received.WithLabelValues("LeaseKeepAlive", "bidi_stream", "etcdserverpb.Lease").Add(4 + 2 + 1)
	after, err := Now(reg)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Since(before)
	if got := d["Range"]; got.Stream || got.Requests() != 5 {
		t.Fatalf("Range: %+v, %g requests; want unary, 5", got, got.Requests())
	}
	if got := d["LeaseKeepAlive"]; !got.Stream || got.Started != 1 || got.Requests() != 6 {
		t.Fatalf("LeaseKeepAlive: %+v, %g requests; want a stream, 1 opened, 6 requests", got, got.Requests())
	}
	if got := d.Requests(); got != 11 {
		t.Fatalf("all requests %g, want 11", got)
	}
	if s := d.String(); s != "LeaseKeepAlive: 6 requests on 1 streams opened; Range: 5" {
		t.Fatalf("String() = %q", s)
	}
}

package s3

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/storage"
)

func TestRequestStatus(t *testing.T) {
	op := func(err error) error { return &storage.OpError{Backend: "s3", Op: "get", Key: "k", Err: err} }
	cases := map[string]error{
		StatusOK:           nil,
		StatusPrecondition: op(storage.Wrap(storage.ErrPrecondition, errors.New("412"))),
		StatusNotFound:     op(storage.ErrNotFound),
		StatusUnavailable:  op(storage.Wrap(storage.ErrUnavailable, context.DeadlineExceeded)),
		StatusDenied:       op(storage.ErrAccessDenied),
		StatusError:        op(storage.ErrNoBucket),
	}
	for want, err := range cases {
		if got := RequestStatus(err); got != want {
			t.Errorf("RequestStatus(%v) = %q, want %q", err, got, want)
		}
	}
	for _, err := range []error{op(storage.ErrInvalid), op(storage.ErrCorrupt), op(context.Canceled), errors.New("other")} {
		if got := RequestStatus(err); got != StatusError {
			t.Errorf("RequestStatus(%v) = %q, want error", err, got)
		}
	}
}

// TestMetricsObserver counts real requests to the gateway, by operation and
// outcome.
func TestMetricsObserver(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	s := openStore(t, WithObserver(MetricsObserver(reg)))
	ctx := testCtx(t)
	if _, err := s.Create(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "k", []byte("v2")); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("second Create: %v", err)
	}
	for range 3 {
		if _, err := s.Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if _, err := s.Replace(ctx, "k", []byte("v3"), `"0123"`); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("Replace with a wrong etag: %v", err)
	}
	want := map[[2]string]float64{
		{"create", "ok"}: 1, {"create", "precondition"}: 1,
		{"get", "ok"}: 3, {"get", "not_found"}: 1,
		{"replace", "precondition"}: 1,
	}
	counts, timed := gatherRequests(t, reg)
	// The store's own clock requests ("servertime") may come and go.
	delete(counts, [2]string{"servertime", "ok"})
	delete(timed, "servertime")
	if !maps.Equal(counts, want) {
		t.Fatalf("requests_total = %v, want %v", counts, want)
	}
	wantTimed := map[string]uint64{"create": 2, "get": 4, "replace": 1}
	if !maps.Equal(timed, wantTimed) {
		t.Fatalf("request_duration_seconds sample counts = %v, want %v", timed, wantTimed)
	}
}

// gatherRequests returns the request counters by (op, status) and the
// duration histograms' sample counts by op.
func gatherRequests(t *testing.T, reg prometheus.Gatherer) (map[[2]string]float64, map[string]uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	counts, timed := map[[2]string]float64{}, map[string]uint64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "tenure_s3_requests_total":
				counts[[2]string{labels["op"], labels["status"]}] = m.GetCounter().GetValue()
			case "tenure_s3_request_duration_seconds":
				timed[labels["op"]] = m.GetHistogram().GetSampleCount()
				if m.GetHistogram().GetSampleSum() <= 0 {
					t.Errorf("durations of %s sum to %v", labels["op"], m.GetHistogram().GetSampleSum())
				}
			default:
				t.Errorf("unexpected metric %s", mf.GetName())
			}
		}
	}
	return counts, timed
}

// TestMetricsObserverSharedRegistry: two stores observing into one registry
// count into the same series instead of failing to register.
func TestMetricsObserverSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := MetricsObserver(reg), MetricsObserver(reg)
	a("get", nil, time.Millisecond)
	b("get", nil, 2*time.Millisecond)
	b("put", fmt.Errorf("x: %w", storage.ErrUnavailable), time.Second)
	want := `
# HELP tenure_s3_requests_total S3 requests by operation and outcome (ok, precondition, not_found, unavailable, denied, error).
# TYPE tenure_s3_requests_total counter
tenure_s3_requests_total{op="get",status="ok"} 2
tenure_s3_requests_total{op="put",status="unavailable"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tenure_s3_requests_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "tenure_s3_request_duration_seconds"); n != 2 {
		t.Fatalf("%d duration series, want 2 (get, put)", n)
	}
}

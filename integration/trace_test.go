package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/otlpreceiver"
	"github.com/tenurehq/tenure/internal/testenv"
)

// TestTraceSubmitClaimExecute: a `tenure run` process whose environment
// configures tracing with OTEL_EXPORTER_OTLP_ENDPOINT alone (and carries a
// Kubernetes service variable, TENURE_PORT, which it ignores with a
// warning) and a `tenure task submit` process with the same variable
// export one trace: the CLI's submit span, the runner's claim and execute
// spans as its children, and the http: handler called with the execute
// span's traceparent. The runner's background work (keep-alives, watches,
// reconciliation LISTs) exports no span of its own.
func TestTraceSubmitClaimExecute(t *testing.T) {
	rcv := otlpreceiver.Start(t)
	var mu sync.Mutex
	var traceparents []string
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceparents = append(traceparents, r.Header.Get("traceparent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	}))
	t.Cleanup(handler.Close)
	// The one variable a user sets: the runner's batch exporter sends
	// within its default 5 s delay, the CLI flushes when it exits.
	otelEnv := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.HTTPURL}

	c := newCluster(t)
	r := c.runEnv("traced", append(otelEnv, "TENURE_PORT=tcp://10.0.0.1:80"),
		append(slices.Clone(fastRunner), "--handler", "traced=http:"+handler.URL)...)
	c.waitAllOwned([]string{"traced"}, 60*time.Second)
	if out := r.out.String(); !strings.Contains(out, "ignoring environment variables") || !strings.Contains(out, "TENURE_PORT") {
		t.Errorf("no warning naming TENURE_PORT on the runner's stderr:\n%s", out)
	}

	out, code, stderr := tenureEnvCode(t, otelEnv, "--config", c.cfgPath, "task", "submit", "traced", "--input", `{"n":1}`, "--wait", "--json")
	if code != 0 {
		t.Fatalf("task submit: exit %d: %s", code, stderr)
	}
	var tk struct{ ID, Status string }
	if err := json.Unmarshal([]byte(out), &tk); err != nil || tk.Status != "completed" {
		t.Fatalf("task submit: %q (%v), want a completed task", out, err)
	}

	// The CLI flushed its spans before exiting; the runner's come within
	// a batch delay of the task's end.
	var submit, claim, execute *otlpreceiver.Span
	testenv.WaitFor(t, "the submit, claim and execute spans", 20*time.Second, func() bool {
		submit, claim, execute = nil, nil, nil
		for _, s := range rcv.Spans() {
			if s.Attributes["tenure.task.id"] != tk.ID && s.Name != "tenure.task.submit" {
				continue
			}
			switch s.Name {
			case "tenure.task.submit":
				submit = &s
			case "tenure.task.claim":
				claim = &s
			case "tenure.task.execute":
				execute = &s
			}
		}
		return submit != nil && claim != nil && execute != nil
	})
	spans := rcv.Spans()
	traceIDs := map[string]bool{}
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "tenure.task.") {
			traceIDs[s.TraceID] = true
		}
	}
	if len(traceIDs) != 1 {
		t.Errorf("the task's spans are in %d traces, want 1", len(traceIDs))
	}
	if submit.ParentSpanID != "" || submit.Resource["service.name"] != "tenure-cli" {
		t.Errorf("submit span: parent %q, service %q; want the CLI's root span", submit.ParentSpanID, submit.Resource["service.name"])
	}
	for _, s := range []*otlpreceiver.Span{claim, execute} {
		if s.TraceID != submit.TraceID || s.ParentSpanID != submit.SpanID {
			t.Errorf("%s: trace %s parent %s, want a child of the submit span %s/%s", s.Name, s.TraceID, s.ParentSpanID, submit.TraceID, submit.SpanID)
		}
		if s.Resource["service.name"] != "tenure" || s.Resource["service.instance.id"] != "traced" {
			t.Errorf("%s: resource %v, want service tenure, instance traced", s.Name, s.Resource)
		}
		if s.Attributes["tenure.task.type"] != "traced" || s.Attributes["tenure.task.attempt"] != "1" || s.Attributes["tenure.shard"] == "" {
			t.Errorf("%s: attributes %v", s.Name, s.Attributes)
		}
	}
	mu.Lock()
	got := slices.Clone(traceparents)
	mu.Unlock()
	want := "00-" + execute.TraceID + "-" + execute.SpanID + "-01"
	if len(got) != 1 || got[0] != want {
		t.Errorf("the handler got traceparents %q, want [%s] (the execute span)", got, want)
	}

	// The claim's S3 write is a span under the claim; the runner's
	// background calls made none: every span it sent has a parent.
	var claimWrite bool
	for _, s := range spans {
		claimWrite = claimWrite || s.Name == "S3.PutObject" && s.ParentSpanID == claim.SpanID
		if s.Resource["service.name"] == "tenure" && s.ParentSpanID == "" {
			t.Errorf("the runner exported a root span %s (%s): background work must not", s.Name, s.Scope)
		}
	}
	if !claimWrite {
		t.Error("no S3.PutObject span under the claim span")
	}
	names := map[string]int{}
	for _, s := range spans {
		names[s.Resource["service.name"]+" "+s.Name]++
	}
	t.Logf("%d spans received: %v", len(spans), names)
}

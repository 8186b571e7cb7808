package messaging_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/messaging/internal/callpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rawClient is an EntityService client without messaging.Client's checks.
func rawClient(t *testing.T, addr string) callpb.EntityServiceClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return callpb.NewEntityServiceClient(cc)
}

func TestServerRejectsBadRequests(t *testing.T) {
	testenv.CheckLeaks(t)
	b := &fake{name: "b"}
	rc := rawClient(t, serve(t, b))
	limit := testConfig().MaxMessageBytes
	cases := []struct {
		name string
		req  *callpb.CallRequest
		code callpb.Failure_Code
		want string
	}{
		{"no type", &callpb.CallRequest{Id: "e1"}, callpb.Failure_CODE_BAD_INPUT, "entity type is empty"},
		{"no id", &callpb.CallRequest{Type: "echo"}, callpb.Failure_CODE_BAD_INPUT, `entity id is empty (type "echo")`},
		{"bad op", &callpb.CallRequest{Type: "echo", Id: "e1", Op: "add one"}, callpb.Failure_CODE_BAD_INPUT, `entity echo/e1: task: invalid op "add one"`},
		{"too large", &callpb.CallRequest{Type: "echo", Id: "e1", Payload: bytes.Repeat([]byte("x"), limit+1)}, callpb.Failure_CODE_TOO_LARGE, "over the"},
	}
	for _, tc := range cases {
		rep, err := rc.Call(ctxT(t), tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		f := rep.GetFailure()
		if f == nil || f.Code != tc.code || !strings.Contains(f.Message, tc.want) {
			t.Errorf("%s: reply %v; want %s naming %q", tc.name, rep, tc.code, tc.want)
		}
	}
	if b.count.Load() != 0 {
		t.Fatalf("%d deliveries of bad requests, want 0", b.count.Load())
	}
	// A request without a group is in the server's default group.
	if _, err := rc.Call(ctxT(t), &callpb.CallRequest{Type: "echo", Id: "e1"}); err != nil {
		t.Fatal(err)
	}
	if d := b.lastDelivery(); d.Shard != shard0 {
		t.Fatalf("delivered on shard %s, want %s", d.Shard, shard0)
	}
}

func TestServerStopIsBounded(t *testing.T) {
	testenv.CheckLeaks(t)
	entered := make(chan struct{})
	b := &fake{name: "b", fn: func(ctx context.Context, _ entity.Delivery) ([]byte, error) {
		close(entered)
		<-ctx.Done() // holds the graceful stop until the hard stop cancels it
		return nil, ctx.Err()
	}}
	srv, err := messaging.NewServer(b, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	lis := listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	v := newView()
	v.runner("b", lis.Addr().String())
	v.lock("b", 5)
	c, _ := v.client(t)
	done := goCall(ctxT(t), c, "e1")
	<-entered
	ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	srv.Stop(ctx)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Stop took %s with a 100ms bound", d)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := (<-done).err; !errors.Is(err, messaging.ErrOutcomeUnknown) {
		t.Fatalf("Call cut by Stop: %v, want ErrOutcomeUnknown", err)
	}
}

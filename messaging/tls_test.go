package messaging_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging"
)

// tlsCall serves b over server TLS settings srv and calls it with client
// settings cli, for at most d.
func tlsCall(t *testing.T, srv, cli messaging.TLSConfig, d time.Duration) (*fake, error) {
	t.Helper()
	st, err := srv.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	ct, err := cli.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	b := &fake{name: "b"}
	v := newView()
	v.runner("b", serve(t, b, messaging.WithTLS(st)))
	v.lock("b", 5)
	c, _ := v.client(t, messaging.WithTLS(ct))
	ctx, cancel := context.WithTimeout(ctxT(t), d)
	defer cancel()
	got, err := c.Call(ctx, "echo", "e1", []byte("hi"))
	if err == nil && string(got) != "b:hi" {
		t.Fatalf("reply %q, want b:hi", got)
	}
	return b, err
}

func TestTLS(t *testing.T) {
	testenv.CheckLeaks(t)
	p := testenv.NewPKI(t)
	srv := messaging.TLSConfig{CertFile: p.ServerCert, KeyFile: p.ServerKey}
	if _, err := tlsCall(t, srv, messaging.TLSConfig{CAFile: p.CA}, 10*time.Second); err != nil {
		t.Fatalf("TLS call: %v", err)
	}
	// A client that does not trust the CA never sends the request.
	b, err := tlsCall(t, srv, messaging.TLSConfig{}, 300*time.Millisecond)
	if err == nil || b.count.Load() != 0 {
		t.Fatalf("call to an untrusted server: %v, %d deliveries; want an error and none", err, b.count.Load())
	}
}

func TestMutualTLS(t *testing.T) {
	testenv.CheckLeaks(t)
	p := testenv.NewPKI(t)
	srv := messaging.TLSConfig{CertFile: p.ServerCert, KeyFile: p.ServerKey, CAFile: p.CA, RequireClientCert: true}
	if _, err := tlsCall(t, srv, messaging.TLSConfig{CAFile: p.CA, ClientCertFile: p.ClientCert, ClientKeyFile: p.ClientKey}, 10*time.Second); err != nil {
		t.Fatalf("mTLS call with a client certificate: %v", err)
	}
	b, err := tlsCall(t, srv, messaging.TLSConfig{CAFile: p.CA}, 300*time.Millisecond)
	if err == nil || b.count.Load() != 0 {
		t.Fatalf("mTLS call without a client certificate: %v, %d deliveries; want an error and none", err, b.count.Load())
	}
	t.Logf("without a client certificate: %v", err)
}

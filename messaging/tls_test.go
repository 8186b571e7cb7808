package messaging_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/messaging"
)

// pki is a throwaway CA with a server and a client certificate, as files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (cert, key string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p := pki{ca: write("ca.pem", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

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
	p := newPKI(t)
	srv := messaging.TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey}
	if _, err := tlsCall(t, srv, messaging.TLSConfig{CAFile: p.ca}, 10*time.Second); err != nil {
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
	p := newPKI(t)
	srv := messaging.TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey, CAFile: p.ca, RequireClientCert: true}
	if _, err := tlsCall(t, srv, messaging.TLSConfig{CAFile: p.ca, ClientCertFile: p.clientCert, ClientKeyFile: p.clientKey}, 10*time.Second); err != nil {
		t.Fatalf("mTLS call with a client certificate: %v", err)
	}
	b, err := tlsCall(t, srv, messaging.TLSConfig{CAFile: p.ca}, 300*time.Millisecond)
	if err == nil || b.count.Load() != 0 {
		t.Fatalf("mTLS call without a client certificate: %v, %d deliveries; want an error and none", err, b.count.Load())
	}
	t.Logf("without a client certificate: %v", err)
}

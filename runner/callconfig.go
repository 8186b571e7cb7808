package runner

import (
	"fmt"
	"net"
)

// CallConfig says where and how the runner serves entity calls (gRPC,
// runner to runner and from clients) and makes them.
type CallConfig struct {
	// Addr is where the entity call server listens, host:port; "" serves
	// none (the runner still makes calls, and the HTTP + JSON path on the
	// admin address still forwards them). Default 127.0.0.1:0: loopback,
	// any free port — the address is found through the runner's
	// registration, so nobody needs to know it in advance.
	Addr string `yaml:"addr"`
	// AdvertiseAddr is the call address other runners and clients reach
	// this runner at, recorded in its registration. Default: Addr, with
	// the port the listener got when Addr's is 0; when Addr's host is
	// unspecified (0.0.0.0 or [::]), the host comes from POD_IP or the
	// host's address (advertise.go). Never an unspecified address.
	AdvertiseAddr string `yaml:"advertise_addr"`
	// Timeout is a call's deadline when the caller's context has none.
	// Default 30s.
	Timeout Duration `yaml:"timeout"`
	// MaxMessageSize bounds a request and a reply, in bytes; a larger
	// request is refused before it is sent. Default 4 MiB.
	MaxMessageSize int `yaml:"max_message_size"`
	// TLS secures calls between runners and from clients. Plain text when
	// cert_file and ca_file are empty.
	TLS CallTLSConfig `yaml:"tls"`
	// HTTP is who may make entity calls over HTTP + JSON (POST
	// /v1/entities/...) on the admin address.
	HTTP CallHTTPConfig `yaml:"http"`
}

// CallHTTPConfig is the data-plane credential of the HTTP + JSON entity
// calls served on the admin address (POST /v1/entities/...): a bearer
// token of its own, distinct from the admin token, so that whoever may
// call entities may not drain runners and the reverse; or, when the admin
// server verifies client certificates (admin.client_ca_file), a verified
// client certificate. Open leaves the endpoint to anyone who reaches the
// admin address (tenure dev sets it). With neither, every call is refused
// (401) with a message saying how to configure one.
type CallHTTPConfig struct {
	// Token is the bearer token a call must carry (Authorization: Bearer
	// TOKEN); secret, prefer TokenFile or TENURE_CALL_HTTP_TOKEN.
	Token string `yaml:"token"`
	// TokenFile holds the token (a mounted Secret); read when needed, so
	// a rotated file takes effect without a restart.
	TokenFile string `yaml:"token_file"`
	// Open serves calls without a credential. Not with Token or TokenFile.
	Open bool `yaml:"open"`
}

// BearerToken returns the data-plane token: Token, else TokenFile's
// content without surrounding white space, else "". A client (the CLI)
// sends it on POST /v1/entities/....
func (h CallHTTPConfig) BearerToken() (string, error) {
	return readToken("call.http.token_file", h.Token, h.TokenFile)
}

// CallTLSConfig is the TLS of entity calls: one certificate serves this
// runner's call server and identifies it as a client to the others, and one
// CA verifies peers.
type CallTLSConfig struct {
	CertFile string `yaml:"cert_file"` // PEM certificate: the server's, and the client's under mutual TLS
	KeyFile  string `yaml:"key_file"`  // its PEM key
	// CAFile verifies the servers called (and, with client_auth, the
	// clients calling); empty: the system roots.
	CAFile string `yaml:"ca_file"`
	// ClientAuth requires and verifies a client certificate (mutual TLS).
	ClientAuth bool `yaml:"client_auth"`
	// ServerName overrides the name a server certificate is checked
	// against (default: the host of the address called).
	ServerName string `yaml:"server_name"`
}

// Enabled reports whether calls use TLS.
func (t CallTLSConfig) Enabled() bool { return t.CertFile != "" || t.CAFile != "" }

// validate checks the call settings, naming the keys.
func (c CallConfig) validate() []error {
	var errs []error
	bad := func(key string, v any, rule string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidConfig, key, v, rule))
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			bad("call.addr", c.Addr, "must be host:port: "+err.Error())
		}
	}
	if err := checkAdvertise("call.advertise_addr", c.AdvertiseAddr); err != nil {
		errs = append(errs, err)
	}
	if c.Timeout <= 0 {
		bad("call.timeout", c.Timeout, "must be > 0")
	}
	if c.MaxMessageSize < 1024 || c.MaxMessageSize > 64<<20 {
		bad("call.max_message_size", c.MaxMessageSize, "must be in [1 KiB, 64 MiB]")
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("call.tls.cert_file", c.TLS.CertFile, "cert_file and key_file go together")
	}
	if c.HTTP.Open && (c.HTTP.Token != "" || c.HTTP.TokenFile != "") {
		bad("call.http.open", true, "an open endpoint takes no credential: set call.http.open or call.http.token (token_file), not both")
	}
	if c.TLS.ClientAuth && c.TLS.CertFile == "" {
		bad("call.tls.client_auth", true, "mutual TLS needs call.tls.cert_file and key_file (the runner calls others as a client too)")
	}
	return errs
}

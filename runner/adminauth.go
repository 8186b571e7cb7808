package runner

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
)

// The admin API's mutating endpoints (POST /admin/drain), pprof, the
// user-data endpoints (GET /debug/shards/…/resident, the console's entity
// and task views) and the console's actions change the cluster, expose
// the process or show user data, so they require credentials: a bearer
// token (admin.token or admin.token_file) or, when the admin server serves
// HTTPS, a client certificate verified by admin.client_ca_file. A runner
// with neither refuses them (403): no unauthenticated drain by default.
// /metrics, /healthz and /readyz stay open for probes and scrapers, and so
// do /debug/status, /debug/timeline and the console's shape views unless
// admin.protect_reads. POST /v1/entities/... is the data plane, with a
// credential of its own (callauth.go).

// adminAuth decides whether a request may reach a protected endpoint.
type adminAuth struct {
	token *fileToken
	// mtls: the server verifies the client certificates given
	// (admin.client_ca_file), so a verified one authorises.
	mtls bool
}

func newAdminAuth(cfg AdminConfig, log *slog.Logger) *adminAuth {
	return &adminAuth{token: &fileToken{key: "admin.token_file", token: cfg.Token, file: cfg.TokenFile, log: log}, mtls: cfg.ClientCAFile != "" && cfg.CertFile != ""}
}

// configured reports whether any credential can authorise.
func (a *adminAuth) configured() bool {
	return a.token.configured() || a.mtls
}

// require wraps h so that it runs only for an authorised request: 403 when
// the runner has no credential configured, 401 with a Bearer challenge
// when the request carries none that is valid.
func (a *adminAuth) require(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !a.configured() {
			http.Error(w, "admin API: "+req.URL.Path+" refused: no credential configured on this runner; set admin.token (or admin.token_file, TENURE_ADMIN_TOKEN) or admin.client_ca_file",
				http.StatusForbidden)
			return
		}
		if a.mtls && req.TLS != nil && len(req.TLS.VerifiedChains) > 0 {
			h.ServeHTTP(w, req)
			return
		}
		ok, err := a.bearer(req)
		if err != nil {
			http.Error(w, "admin API: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if !ok {
			need := "Authorization: Bearer <admin.token>"
			if a.mtls {
				need += " or a client certificate verified by admin.client_ca_file"
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="tenure admin"`)
			http.Error(w, "admin API: "+req.URL.Path+" needs "+need, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// authorized reports whether the request carries a valid credential: a
// client certificate verified under mTLS, or the bearer token.
func (a *adminAuth) authorized(req *http.Request) (bool, error) {
	if a.mtls && req.TLS != nil && len(req.TLS.VerifiedChains) > 0 {
		return true, nil
	}
	return a.bearer(req)
}

// consoleAuth is the console's view of the admin auth.
type consoleAuth struct{ a *adminAuth }

func (c consoleAuth) Configured() bool                           { return c.a.configured() }
func (c consoleAuth) Authorized(req *http.Request) (bool, error) { return c.a.authorized(req) }

// bearer reports whether the request's bearer token is the admin token.
func (a *adminAuth) bearer(req *http.Request) (bool, error) { return bearerMatches(req, a.token) }

// bearerMatches reports whether the request's bearer token is tok's. Both
// are hashed first, so the comparison's time depends on neither's length
// or content; an empty token (an empty token file) matches nothing.
func bearerMatches(req *http.Request, tok *fileToken) (bool, error) {
	scheme, given, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false, nil
	}
	want, err := tok.get()
	if err != nil || want == "" {
		return false, err
	}
	g, w := sha256.Sum256([]byte(strings.TrimSpace(given))), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1, nil
}

// validateAdmin checks advertise_addr and the admin.* keys, naming them.
func (c Config) validateAdmin() []error {
	var errs []error
	bad := func(key string, v any, rule string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidConfig, key, v, rule))
	}
	if err := checkAdvertise("advertise_addr", c.AdvertiseAddr); err != nil {
		errs = append(errs, err)
	}
	a := c.Admin
	if (a.CertFile == "") != (a.KeyFile == "") {
		bad("admin.cert_file", a.CertFile, "cert_file and key_file go together")
	}
	if a.ClientCAFile != "" && a.CertFile == "" {
		bad("admin.client_ca_file", a.ClientCAFile, "client certificates need the admin server to serve HTTPS: set admin.cert_file and admin.key_file")
	}
	if a.ProtectReads && a.Token == "" && a.TokenFile == "" && a.ClientCAFile == "" {
		bad("admin.protect_reads", true, "needs an admin credential to protect the reads with: set admin.token (or admin.token_file, TENURE_ADMIN_TOKEN) or admin.client_ca_file")
	}
	if (a.ClientCertFile == "") != (a.ClientKeyFile == "") {
		bad("admin.client_cert_file", a.ClientCertFile, "client_cert_file and client_key_file go together")
	}
	// One credential for two roles would let every caller of entities
	// drain runners: the data-plane token must be another.
	h := c.Call.HTTP
	if h.Token != "" && h.Token == a.Token {
		bad("call.http.token", "(hidden)", "must differ from admin.token: entity calls and administration take different credentials")
	}
	if h.TokenFile != "" && h.TokenFile == a.TokenFile {
		bad("call.http.token_file", h.TokenFile, "must differ from admin.token_file: entity calls and administration take different credentials")
	}
	return errs
}

// serverTLS is the admin server's TLS: nil (plain HTTP) without
// admin.cert_file. The certificate is reloaded when its files change; the
// client CA is read once. Client certificates are verified when given, not
// required, so scrapers and probes reach the open endpoints without one.
func (a AdminConfig) serverTLS(log *slog.Logger) (*tls.Config, error) {
	if a.CertFile == "" {
		return nil, nil
	}
	kp, err := newKeyPair("admin.cert_file/key_file", a.CertFile, a.KeyFile, log)
	if err != nil {
		return nil, err
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.serverCertificate}
	if a.ClientCAFile != "" {
		if t.ClientCAs, err = caPool("admin.client_ca_file", a.ClientCAFile); err != nil {
			return nil, err
		}
		t.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return t, nil
}

// AdminTLSClientConfig returns the TLS config a client (the CLI, a test)
// uses to reach runners' HTTPS admin servers: admin.ca_file verifies their
// certificates (empty: the system roots), and admin.client_cert_file and
// admin.client_key_file, when set, are presented as the client certificate
// (reloaded when the files change). nil when none of these keys is set.
func AdminTLSClientConfig(cfg Config) (*tls.Config, error) {
	a := cfg.Admin
	if a.CAFile == "" && a.ClientCertFile == "" {
		return nil, nil
	}
	return clientFiles(&tls.Config{MinVersion: tls.VersionTLS12}, "admin.ca_file", a.CAFile,
		"admin.client_cert_file/client_key_file", a.ClientCertFile, a.ClientKeyFile)
}

// clientFiles completes a client's TLS config: RootCAs from caFile, and
// the client certificate of certFile and keyFile (reloaded when they
// change), each when given; caKey and pairKeys name them in errors.
func clientFiles(t *tls.Config, caKey, caFile, pairKeys, certFile, keyFile string) (*tls.Config, error) {
	var err error
	if caFile != "" {
		if t.RootCAs, err = caPool(caKey, caFile); err != nil {
			return nil, err
		}
	}
	if certFile != "" {
		kp, err := newKeyPair(pairKeys, certFile, keyFile, nil)
		if err != nil {
			return nil, err
		}
		t.GetClientCertificate = kp.clientCertificate
	}
	return t, nil
}

// caPool reads a PEM CA bundle, naming its key in errors.
func caPool(key, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, key, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: %s %s: no PEM certificate in it", ErrInvalidConfig, key, path)
	}
	return pool, nil
}

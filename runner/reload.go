package runner

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Certificates and tokens come from files that a secret manager rotates
// (a Kubernetes Secret volume, cert-manager, Vault agent): the runner
// checks the files' modification time and size when it needs them (a
// stat, cheap next to a TLS handshake) and reads them again only when they
// changed, so a rotation takes effect on the next connection or request
// without a restart.

// fileStamp is what tells a changed file: its modification time and size.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// keyPair is a certificate and key file pair, reloaded when either
// changes. A pair that does not load (a half-written rotation: the new
// certificate beside the old key) keeps the last good one in use and is
// tried again at the next use; the warning names the keys and files, never
// their content.
type keyPair struct {
	keys          string // the config keys, for errors: "etcd.cert_file/key_file"
	certFile, key string
	log           *slog.Logger
	mu            sync.Mutex
	certAt, keyAt fileStamp
	cert          *tls.Certificate
	lastErr       string // the last failure logged, so a broken file logs once
}

// newKeyPair loads the pair once: a pair that does not load at start is a
// configuration error.
func newKeyPair(keys, certFile, keyFile string, log *slog.Logger) (*keyPair, error) {
	if log == nil {
		log = slog.Default()
	}
	p := &keyPair{keys: keys, certFile: certFile, key: keyFile, log: log}
	if _, err := p.get(); err != nil {
		return nil, err
	}
	return p, nil
}

// get returns the pair's certificate, reloaded if a file changed since it
// was last read.
func (p *keyPair) get() (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	certAt, err1 := stampOf(p.certFile)
	keyAt, err2 := stampOf(p.key)
	if err1 == nil && err2 == nil && p.cert != nil && certAt == p.certAt && keyAt == p.keyAt {
		return p.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(p.certFile, p.key)
	if err != nil {
		err = fmt.Errorf("%w: %s: %w", ErrInvalidConfig, p.keys, err)
		if p.cert == nil {
			return nil, err
		}
		if msg := err.Error(); msg != p.lastErr {
			p.lastErr = msg
			p.log.Warn("certificate files changed but do not load; keeping the previous certificate", "keys", p.keys, "err", err)
		}
		return p.cert, nil
	}
	p.cert, p.certAt, p.keyAt, p.lastErr = &cert, certAt, keyAt, ""
	return p.cert, nil
}

// clientCertificate is tls.Config.GetClientCertificate.
func (p *keyPair) clientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return p.get()
}

// serverCertificate is tls.Config.GetCertificate.
func (p *keyPair) serverCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.get()
}

// fileToken is a bearer token: the configured one, else the content of
// its file (admin.token_file, call.http.token_file), read again when the
// file changes. A file that cannot be read after it was read once keeps
// the last token (a Secret volume swaps its files through a symlink);
// one never read is an error.
type fileToken struct {
	key   string // the file's config key, for errors and logs
	token string
	file  string
	log   *slog.Logger
	mu    sync.Mutex
	at    fileStamp
	tok   string
	read  bool
}

// configured reports whether a token or a token file is set.
func (f *fileToken) configured() bool { return f.token != "" || f.file != "" }

// get returns the token, else the file's content.
func (f *fileToken) get() (string, error) {
	if f.token != "" || f.file == "" {
		return f.token, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	at, err := stampOf(f.file)
	if err == nil && f.read && at == f.at {
		return f.tok, nil
	}
	tok, err := readToken(f.key, f.token, f.file)
	if err != nil {
		if !f.read {
			return "", err
		}
		f.log.Warn(f.key+" unreadable; keeping the previous token", "err", err)
		return f.tok, nil
	}
	f.tok, f.at, f.read = tok, at, true
	return tok, nil
}

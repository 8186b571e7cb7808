package messaging

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSConfig names the files of the call transport's TLS. The zero value is
// plaintext (the loopback dev default); a runner sets CertFile and KeyFile
// (its certificate, served to callers and, for mutual TLS, shown to the
// runners it calls) and CAFile (the CA that signed its peers).
type TLSConfig struct {
	// CertFile and KeyFile are the PEM certificate and key this process
	// serves with, and presents as a client when ClientCertFile is empty.
	CertFile, KeyFile string
	// CAFile is the PEM bundle peers are verified against: servers by a
	// client, and clients by a server requiring client certificates.
	// Empty: the system roots for servers.
	CAFile string
	// ClientCertFile and ClientKeyFile, when set, are the certificate a
	// client presents instead of CertFile/KeyFile (a caller that serves
	// nothing).
	ClientCertFile, ClientKeyFile string
	// RequireClientCert makes a server refuse clients without a
	// certificate signed by CAFile: mutual TLS.
	RequireClientCert bool
	// ServerName overrides the name a client verifies the server's
	// certificate against (default: the host of the call address).
	ServerName string
}

// Enabled reports whether any TLS is configured.
func (c TLSConfig) Enabled() bool {
	return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" || c.ClientCertFile != ""
}

// ServerTLS returns the server side, for WithTLS on a Server.
func (c TLSConfig) ServerTLS() (*tls.Config, error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, fmt.Errorf("%w: TLS: a server needs CertFile and KeyFile (have %q, %q)", ErrInvalidConfig, c.CertFile, c.KeyFile)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS: certificate %s, key %s: %w", ErrInvalidConfig, c.CertFile, c.KeyFile, err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.RequireClientCert {
		if c.CAFile == "" {
			return nil, fmt.Errorf("%w: TLS: RequireClientCert needs CAFile to verify clients against", ErrInvalidConfig)
		}
		if conf.ClientCAs, err = loadPool(c.CAFile); err != nil {
			return nil, err
		}
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, nil
}

// ClientTLS returns the client side, for WithTLS on a Client.
func (c TLSConfig) ClientTLS() (*tls.Config, error) {
	conf := &tls.Config{ServerName: c.ServerName, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		conf.RootCAs = pool
	}
	certFile, keyFile := c.CertFile, c.KeyFile
	if c.ClientCertFile != "" || c.ClientKeyFile != "" {
		certFile, keyFile = c.ClientCertFile, c.ClientKeyFile
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS: client certificate %s, key %s: %w", ErrInvalidConfig, certFile, keyFile, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS: CAFile: %w", ErrInvalidConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: TLS: CAFile %s holds no PEM certificate", ErrInvalidConfig, file)
	}
	return pool, nil
}

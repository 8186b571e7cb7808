package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/console"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

// CLI is what every command gets: where to write, the environment, and the
// global flags. Commands read nothing else from the process, so tests run
// them with buffers and a made-up environment.
type CLI struct {
	Stdout, Stderr io.Writer
	// Environ is the environment (os.Environ()); the TENURE_* variables in
	// it configure the commands.
	Environ []string
	// ConfigPath is the global --config flag; "" means $TENURE_CONFIG,
	// else ./.tenure-dev/tenure.yaml when it exists.
	ConfigPath string
	// Version is the CLI's version, sent to runners as the User-Agent.
	Version string

	// output is the global -o flag: text or json.
	output string
	// benchBase is the base of `tenure bench`'s options (tests point its
	// Executable and Infra at a built binary and shared servers).
	benchBase benchOptions
	// loaded is the config last loaded, for error hints (nil: none).
	loaded *loadedConfig
	// defaultConfig is the file loaded when no config is named, if it
	// exists ("": devConfigPath, in the working directory). Tests name one
	// of their own: a ./.tenure-dev a developer left in the package's
	// directory must not change what they see.
	defaultConfig string
}

// ConfigEnv names the config file when --config is not given.
const ConfigEnv = runner.ConfigEnv

// ErrNoConfig reports that no config was given and none was found.
var ErrNoConfig = errors.New("no config: run `tenure dev` here, pass --config or set " + ConfigEnv)

// ErrNotInitialised reports a cluster whose meta is not in its
// coordination store (etcd or S3) yet.
var ErrNotInitialised = runner.ErrClusterNotFound

// devConfigPath is where `tenure dev` writes its config, relative to the
// working directory.
var devConfigPath = filepath.FromSlash(runner.DevConfigPath)

// LoadConfig loads the config: the file of --config, else of
// $TENURE_CONFIG, else ./.tenure-dev/tenure.yaml when it exists, then the TENURE_* variables of
// the environment, then overrides ("key=value"). With no file at all it
// fails with ErrNoConfig, unless TENURE_* variables naming config keys
// configure the commands on their own (as in a container). TENURE_*
// variables that name no key are ignored with one warning on stderr (see
// runner.Load).
func (c *CLI) LoadConfig(overrides []string) (runner.Config, error) {
	cfg, err := c.loadConfig(overrides)
	if err == nil {
		c.warnUnknownEnv(cfg)
	}
	return cfg, err
}

// loadConfig is LoadConfig without the warning, for `tenure run`, whose
// runner logs it (runner.New).
func (c *CLI) loadConfig(overrides []string) (runner.Config, error) {
	path, environ, err := c.configSource()
	if err != nil {
		return runner.Config{}, err
	}
	cfg, err := runner.Load(path, environ, overrides)
	if err == nil {
		if path == os.DevNull {
			path = ""
		}
		c.loaded = &loadedConfig{path: path, dev: isDevConfig(path, cfg)}
	}
	return cfg, err
}

// configSource returns the config file to load and the environment:
// --config, else $TENURE_CONFIG, else the default file (runner.FindConfig's
// ./.tenure-dev/tenure.yaml, or defaultConfig) when it exists, else none
// (os.DevNull) when TENURE_* variables configure the commands on their
// own.
func (c *CLI) configSource() (path string, environ []string, err error) {
	path = c.ConfigPath
	for _, kv := range c.Environ {
		if v, ok := strings.CutPrefix(kv, ConfigEnv+"="); ok && path == "" {
			path = v
		}
	}
	if path == "" {
		def := c.defaultConfig
		if def == "" {
			def = devConfigPath
		}
		if _, err := os.Stat(def); err == nil {
			path = def
		}
	}
	if path == "" {
		if !slices.ContainsFunc(c.Environ, configEnv) {
			return "", nil, ErrNoConfig
		}
		path = os.DevNull // configured by the environment alone
	}
	return path, c.Environ, nil
}

// configEnv reports whether kv sets a config key.
func configEnv(kv string) bool {
	name, _, _ := strings.Cut(kv, "=")
	_, ok := runner.EnvKey(name)
	return ok
}

// warnUnknownEnv prints one line naming the TENURE_* variables the config
// ignored.
func (c *CLI) warnUnknownEnv(cfg runner.Config) {
	if names := cfg.UnknownEnv(); len(names) > 0 {
		fmt.Fprintf(c.Stderr, "warning: ignoring environment variables that name no config key: %s (tenure run --help lists the keys)\n", strings.Join(names, ", "))
	}
}

// Conn is a client's connection to a cluster: its coordination store
// (runners, locks, meta, dynamic config, wake-ups; etcd or S3), its S3
// bucket and a task client.
type Conn struct {
	CoordConn
	Objects storage.ObjectStore
	Tasks   *task.Client
	// Group is the shard group tasks are submitted to by default: "default"
	// when the cluster has it, else its first group.
	Group string

	client *runner.Client
}

// Close closes the task client and the coordination store (the S3 client
// holds nothing to close).
func (c *Conn) Close() error { return errors.Join(c.client.Close(), c.Store.Close()) }

// Connect dials the cluster of cfg: its coordination store (etcd under
// /tenure/<cluster>/, or the bucket under the S3 prefix + coord/) and the
// S3 bucket under its prefix, with a task client placed by the cluster
// meta (runner.Connect, on the CLI's coordination store; opts add to its
// options, e.g. runner.WithGroup). A cluster no runner has started yet
// gives ErrNotInitialised. No S3 request is made.
func (c *CLI) Connect(ctx context.Context, cfg runner.Config, opts ...runner.ClientOption) (*Conn, error) {
	rs, err := c.openCoord(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// The CLI is no runner: its default group is the cluster's ("default",
	// else its first), not the first one the config's runners serve.
	cfg.Groups = nil
	logger := slog.New(slog.NewTextHandler(c.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts = append([]runner.ClientOption{runner.WithRunnerStore(rs), runner.WithClientLogger(logger)}, opts...)
	client, err := runner.Connect(ctx, cfg, opts...)
	if err != nil {
		rs.Close()
		return nil, err
	}
	return &Conn{CoordConn: CoordConn{Config: cfg, Meta: client.Meta(), Store: rs}, Objects: client.Store().Objects(),
		Tasks: client.Client, Group: client.Group(), client: client}, nil
}

// durationFlag is a duration flag that names what it wants when the value
// does not parse, and refuses negative values.
type durationFlag struct {
	d   time.Duration
	set bool
}

func (f *durationFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return f.d.String()
}

// Type names the value in help.
func (f *durationFlag) Type() string { return "duration" }

func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 500ms, 30s or 5m")
	}
	if d < 0 {
		return fmt.Errorf("must not be negative")
	}
	f.d, f.set = d, true
	return nil
}

// lineError keeps an error to one line (joined errors are separated by
// "; ") while errors.Is and errors.As still see the original.
type lineError struct{ err error }

func (e lineError) Error() string {
	return strings.ReplaceAll(strings.TrimSpace(e.err.Error()), "\n", "; ")
}

func (e lineError) Unwrap() error { return e.err }

func flatten(err error) error {
	if err == nil || !strings.Contains(err.Error(), "\n") {
		return err
	}
	return lineError{err}
}

// Admin HTTP timeouts: runners answer their admin endpoints from memory, so
// a slow answer means an unreachable or stuck runner.
const (
	adminStatusTimeout = time.Second
	adminActionTimeout = 5 * time.Second
)

// admin calls runners' admin endpoints (GET /debug/status, POST
// /admin/drain). Admin addresses are cluster-internal, so no proxy is used.
type admin struct {
	hc        *http.Client
	userAgent string
	// token is the admin bearer token (admin.token, admin.token_file),
	// sent with every request when set: the runners require it on their
	// mutating endpoints, and the open ones ignore it.
	token string
}

// ErrAdminAuth reports a runner refusing an admin request for want of the
// right token (or client certificate).
var ErrAdminAuth = errors.New("the runner refused the admin request: set admin.token (or TENURE_ADMIN_TOKEN, admin.token_file) to the runners' token")

func newAdmin(cli *CLI, cfg runner.Config) (*admin, error) {
	token, err := cfg.Admin.BearerToken()
	if err != nil {
		return nil, err
	}
	// Runners serving their admin API over HTTPS register https:// URLs;
	// admin.ca_file verifies them and admin.client_cert_file is the
	// client certificate that authorises a drain under mTLS.
	tlsCfg, err := runner.AdminTLSClientConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &admin{
		token: token,
		hc: &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: adminActionTimeout}).DialContext,
			TLSClientConfig:     tlsCfg,
			TLSHandshakeTimeout: adminActionTimeout,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     10 * time.Second,
		}},
		userAgent: "tenure-cli/" + cli.Version,
	}, nil
}

// close drops the idle connections, so a command leaves nothing behind.
func (a *admin) close() { a.hc.CloseIdleConnections() }

// adminURL joins a runner's registered address ("host:port", or a URL)
// and a path.
func adminURL(addr, path string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimSuffix(addr, "/") + path
}

// runnerState is what a runner's GET /debug/status reports, decoded
// leniently, as the console decodes it.
type runnerState = console.RunnerStatus

// status fetches a runner's /debug/status within adminStatusTimeout.
func (a *admin) status(ctx context.Context, addr string) (runnerState, error) {
	if addr == "" {
		return runnerState{}, errors.New("no admin address registered")
	}
	ctx, cancel := context.WithTimeout(ctx, adminStatusTimeout)
	defer cancel()
	body, err := a.do(ctx, http.MethodGet, adminURL(addr, "/debug/status"))
	if err != nil {
		return runnerState{}, err
	}
	return console.DecodeStatus(body)
}

// do makes one admin request; a status other than 2xx is an error quoting
// the start of the body.
func (a *admin) do(ctx context.Context, method, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", a.userAgent)
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the response: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return nil, fmt.Errorf("%s %s: %s: %s: %w", method, url, resp.Status, msg, ErrAdminAuth)
		}
		return nil, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, msg)
	}
	return body, nil
}

// runnerStates fetches the status of every runner at once; the error of
// an unreachable one is kept instead.
func (a *admin) runnerStates(ctx context.Context, runners []storage.RunnerInfo) ([]runnerState, []error) {
	states := make([]runnerState, len(runners))
	errs := make([]error, len(runners))
	var wg sync.WaitGroup
	for i, r := range runners {
		wg.Go(func() { states[i], errs[i] = a.status(ctx, r.Addr) })
	}
	wg.Wait()
	return states, errs
}

package external

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/runner"
)

// SingletonEnv is the variable naming the singleton type in an exec:
// singleton's environment; SingletonRunnerEnv names the runner running
// it, when known (WithRunnerID).
const (
	SingletonEnv       = runner.EnvPrefix + "SINGLETON"
	SingletonRunnerEnv = runner.EnvPrefix + "SINGLETON_RUNNER"
)

// singletonAnswerWait bounds reading the body of an http: singleton's
// response: the response ends the run whatever its body, which a server
// may keep open.
const singletonAnswerWait = time.Second

// SingletonOption configures RegisterSingletons and NewSingleton.
type SingletonOption func(*singletonOptions)

type singletonOptions struct {
	runnerID string
	grace    time.Duration
}

// WithRunnerID names the runner the singletons run on: the "runner" field
// of an http: singleton's request and SingletonRunnerEnv of an exec: one.
// Without it they do not name it.
func WithRunnerID(id string) SingletonOption {
	return func(o *singletonOptions) { o.runnerID = id }
}

// RegisterSingletons registers the singleton types of specs, each
// "TYPE=SPEC" (see NewSingleton), on h. Every spec is checked before any
// is registered, so a bad one leaves h unchanged; a type given twice or
// already a singleton type of h is an error naming it. Singleton types are
// a namespace of their own (see entity.Host.RegisterSingleton): a task
// type of the same name is not a conflict.
func RegisterSingletons(h *entity.Host, specs []string) error {
	return RegisterSingletonsWith(h, specs)
}

// RegisterSingletonsWith is RegisterSingletons with options: a runner
// that knows its id gives it with WithRunnerID, so that its singletons
// name it.
func RegisterSingletonsWith(h *entity.Host, specs []string, opts ...SingletonOption) error {
	registered := h.SingletonTypes()
	taken := func(typ string) string {
		if slices.Contains(registered, typ) {
			return fmt.Sprintf("type %q is already a singleton on this host", typ)
		}
		return ""
	}
	build := func(typ, spec string) (entity.SingletonFactory, error) { return NewSingleton(typ, spec, opts...) }
	return registerAll(specs, "singleton", taken, build, h.RegisterSingleton)
}

// NewSingleton builds the factory of singleton type typ from a spec:
//
// http:URL: Run POSTs {"singleton": TYPE, "runner": RUNNER} (runner only
// with WithRunnerID) to URL and holds the request open for as long as the
// singleton runs here. The endpoint runs the singleton's work while the
// request is open; when the runner stops it (lock loss, detachment,
// drain), the request is cancelled and the endpoint sees its connection
// close. A response, of any status, or a transport error ends Run, and
// the host starts it again after its backoff. Connecting and the TLS
// handshake are bounded (5 s) and TCP keep-alives find a dead endpoint;
// the request itself has no timeout, by design.
//
// exec:COMMAND: Run runs COMMAND as the exec: handler does (a shell, a
// process group of its own on Unix, the runner's environment minus its
// TENURE_* configuration) with SingletonEnv=TYPE (and SingletonRunnerEnv
// with WithRunnerID), no stdin and its output on the runner's stderr, and
// returns when it exits: exit status 0 as a return, any other as a
// failure with the last KiB of its stderr; either way the host starts it
// again after its backoff. When the runner stops the singleton the group
// gets SIGTERM, then SIGKILL after ExecKillGrace.
//
// A spec that does not parse gives a *HandlerSpecError naming it.
func NewSingleton(typ, spec string, opts ...SingletonOption) (entity.SingletonFactory, error) {
	o := singletonOptions{grace: ExecKillGrace}
	for _, opt := range opts {
		opt(&o)
	}
	p, err := parseSpec(spec, "singleton")
	if err != nil {
		return nil, err
	}
	var s entity.Singleton
	if p.command != "" {
		s = &execSingleton{typ: typ, command: p.command, opts: o}
	} else {
		body, err := json.Marshal(singletonRequest{Singleton: typ, Runner: o.runnerID})
		if err != nil {
			return nil, fmt.Errorf("singleton %s: encode the request: %w", typ, err)
		}
		s = &httpSingleton{typ: typ, target: p.url, body: body, client: singletonClient()}
	}
	// Both hold no state between runs: one instance serves every start.
	return func() (entity.Singleton, error) { return s, nil }, nil
}

// singletonRequest is the body an http: singleton POSTs.
type singletonRequest struct {
	Singleton string `json:"singleton"`
	Runner    string `json:"runner,omitempty"`
}

// singletonClient is the handlers' client without pooled connections: each
// run has a connection of its own, so that its end is the connection's
// close, which every server sees. Its keep-alive probes find an endpoint
// gone without a word (a crashed host, a cut network) within about 30 s,
// ending the run; the request has no other bound.
func singletonClient() *http.Client {
	c := defaultHandlerClient()
	tr := c.Transport.(*http.Transport)
	tr.DisableKeepAlives = true
	tr.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}}).DialContext
	return c
}

// httpSingleton runs a singleton as a long-lived request to an endpoint.
type httpSingleton struct {
	typ, target string
	body        []byte
	client      *http.Client
}

// Run holds a request to the endpoint open until ctx ends or it answers.
func (s *httpSingleton) Run(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.target, bytes.NewReader(s.body))
	if err != nil {
		return fmt.Errorf("http singleton %s: %s: %w", s.typ, s.target, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Tenure-Singleton", s.typ)
	resp, err := s.client.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		return fmt.Errorf("http singleton %s: %w", s.typ, err)
	}
	stop := time.AfterFunc(singletonAnswerWait, func() { resp.Body.Close() })
	got, _ := io.ReadAll(io.LimitReader(resp.Body, handlerErrorTail))
	stop.Stop()
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return fmt.Errorf("http singleton %s: %s answered %s: %s", s.typ, s.target, resp.Status, head(got, handlerErrorTail))
}

// execSingleton runs a singleton as a command.
type execSingleton struct {
	typ, command string
	opts         singletonOptions
}

// Run runs the command until it exits or ctx ends.
func (s *execSingleton) Run(ctx context.Context) error {
	stderr := &tailBuffer{max: handlerErrorTail}
	cmd := shellCommand(s.command)
	cmd.Stdout, cmd.Stderr = os.Stderr, io.MultiWriter(os.Stderr, stderr)
	cmd.Env = append(commandEnv(os.Environ(), 2), SingletonEnv+"="+s.typ)
	if s.opts.runnerID != "" {
		cmd.Env = append(cmd.Env, SingletonRunnerEnv+"="+s.opts.runnerID)
	}
	// See execHandler: a process escaping the group may hold stderr open.
	cmd.WaitDelay = s.opts.grace + time.Second
	err := runGroup(ctx, cmd, s.opts.grace)
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	if err == nil || errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success() {
		return nil
	}
	return fmt.Errorf("exec singleton %s: %w: %s", s.typ, err, stderr.text())
}

package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

// Handler limits of the standalone runner's http: and exec: handlers.
const (
	// MaxHandlerResult is the largest result an http: response body or an
	// exec: command's stdout may hold (1 MiB); more fails the task
	// permanently, since the result is stored in the task object.
	MaxHandlerResult = 1 << 20
	// handlerErrorTail is how much of a failed handler's output (an http:
	// response body, an exec: command's stderr) the task error keeps.
	handlerErrorTail = 1 << 10
	// ExecKillGrace is how long an exec: command has between SIGTERM and
	// SIGKILL once its task is interrupted.
	ExecKillGrace = 2 * time.Second
	// ExecExitRetry is the exit status (EX_TEMPFAIL) by which an exec:
	// command asks for a retry.
	ExecExitRetry = 75
	// maxSleep bounds the built-in sleep's input, so that a typo cannot
	// hold a handler slot for days (the task's timeout ends it sooner).
	maxSleep = 24 * time.Hour
)

// The built-in task types every standalone runner serves.
const (
	// TypeEcho returns its input as its result (null when empty).
	TypeEcho = "echo"
	// TypeSleep sleeps {"ms": N} milliseconds, honouring interruption, and
	// returns {"slept_ms": N}.
	TypeSleep = "sleep"
)

// BuiltinTypes returns the built-in task types, sorted.
func BuiltinTypes() []string { return []string{TypeEcho, TypeSleep} }

// HandlerSpecError reports a handler spec (http:URL, exec:COMMAND, or a
// TYPE=SPEC pair) that cannot be used. It matches ErrInvalidConfig.
type HandlerSpecError struct {
	Spec   string // as given
	Reason string
}

func (e *HandlerSpecError) Error() string {
	return fmt.Sprintf("%v: handler %q: %s", ErrInvalidConfig, e.Spec, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) hold.
func (e *HandlerSpecError) Unwrap() error { return ErrInvalidConfig }

// RegisterBuiltins registers the built-in task types on h: "echo" returns
// its input (null when empty); "sleep", with input {"ms": N}, sleeps N
// milliseconds (cut short when the task is interrupted) and returns
// {"slept_ms": N}.
func RegisterBuiltins(h *entity.Host) error {
	if err := h.RegisterFunc(TypeEcho, echo); err != nil {
		return err
	}
	return h.RegisterFunc(TypeSleep, sleep)
}

func echo(_ context.Context, t *task.Task) (json.RawMessage, error) {
	if len(t.Input) == 0 {
		return json.RawMessage("null"), nil
	}
	return t.Input, nil
}

func sleep(ctx context.Context, t *task.Task) (json.RawMessage, error) {
	var in struct {
		MS *int64 `json:"ms"`
	}
	if len(t.Input) > 0 {
		if err := json.Unmarshal(t.Input, &in); err != nil {
			return nil, entity.Permanent(fmt.Errorf("sleep: input must be {\"ms\": N}: %w", err))
		}
	}
	var ms int64
	if in.MS != nil {
		ms = *in.MS
	}
	if ms < 0 || time.Duration(ms) > maxSleep/time.Millisecond {
		return nil, entity.Permanent(fmt.Errorf("sleep: ms = %d: must be in [0, %d]", ms, maxSleep.Milliseconds()))
	}
	timer := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
		return json.RawMessage(`{"slept_ms":` + strconv.FormatInt(ms, 10) + `}`), nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// RegisterHandlers registers the handlers of specs, each "TYPE=SPEC" (see
// ParseHandler and NewHandler), on h. Every spec is checked before any is
// registered, so a bad one leaves h unchanged; a type given twice, naming a
// built-in type or already registered on h is an error naming it.
func RegisterHandlers(h *entity.Host, specs []string) error {
	type pending struct {
		typ string
		fn  entity.HandlerFunc
	}
	var all []pending
	seen := map[string]string{}
	registered := h.Types()
	for _, s := range specs {
		typ, spec, err := ParseHandler(s)
		if err != nil {
			return err
		}
		if err := task.ValidateType(typ); err != nil {
			return &HandlerSpecError{Spec: s, Reason: err.Error()}
		}
		for _, b := range BuiltinTypes() {
			if typ == b {
				return &HandlerSpecError{Spec: s, Reason: fmt.Sprintf("type %q is built in and cannot be overridden", typ)}
			}
		}
		if prev, dup := seen[typ]; dup {
			return &HandlerSpecError{Spec: s, Reason: fmt.Sprintf("type %q already has a handler (%q)", typ, prev)}
		}
		if slices.Contains(registered, typ) {
			return &HandlerSpecError{Spec: s, Reason: fmt.Sprintf("type %q is already registered on this host", typ)}
		}
		seen[typ] = s
		fn, err := NewHandler(spec, nil)
		if err != nil {
			return fmt.Errorf("type %s: %w", typ, err)
		}
		all = append(all, pending{typ, fn})
	}
	for _, p := range all {
		if err := h.RegisterFunc(p.typ, p.fn); err != nil {
			return err
		}
	}
	return nil
}

// NewHandler builds a task handler from a spec:
//
// http:URL POSTs the task (its JSON, as task.Task encodes it) to URL under
// the task's context, bounded by the task's Timeout, with the W3C trace
// context of the attempt. A 2xx response completes the task with the body
// as its result (JSON of at most MaxHandlerResult bytes; empty is null). A
// 4xx fails it permanently with the status and the first KiB of the body,
// except 408 and 429, which ask to be retried, as do 5xx, timeouts and
// connection errors. Redirects are not followed (a 3xx fails permanently).
// client, if not nil, sends the requests; nil uses a client without proxy
// and with dial and TLS handshake timeouts.
//
// exec:COMMAND runs COMMAND through /bin/sh -c in a process group of its
// own, with the task input on stdin and the runner's environment (minus
// its TENURE_* configuration, which may hold credentials) plus
// TENURE_TASK_ID, TENURE_TASK_REF, TENURE_TASK_TYPE, TENURE_TASK_ENTITY and
// TENURE_TASK_ATTEMPT. Config loading ignores those (TaskEnvPrefix), so
// the command may itself run `tenure task submit` (given a config file:
// the runner's TENURE_* configuration is not passed on). Exit status 0
// completes the task with stdout as its result (JSON of at most
// MaxHandlerResult bytes; empty is null); 75 (EX_TEMPFAIL) asks for a
// retry; any other status fails it permanently with the last KiB of
// stderr. When the task is interrupted the group gets SIGTERM, then
// SIGKILL after ExecKillGrace; processes the command leaves behind in its
// group are killed when it exits.
//
// A spec that does not parse gives a *HandlerSpecError naming it.
func NewHandler(spec string, client *http.Client) (entity.HandlerFunc, error) {
	kind, arg, ok := strings.Cut(spec, ":")
	if !ok {
		return nil, &HandlerSpecError{Spec: spec, Reason: "want http:URL or exec:COMMAND"}
	}
	switch kind {
	case "http":
		u, err := url.Parse(arg)
		switch {
		case arg == "":
			return nil, &HandlerSpecError{Spec: spec, Reason: "no URL after http:"}
		case err != nil:
			return nil, &HandlerSpecError{Spec: spec, Reason: fmt.Sprintf("URL does not parse: %v", err)}
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, &HandlerSpecError{Spec: spec, Reason: fmt.Sprintf("URL %q must start with http:// or https://", arg)}
		case u.Host == "":
			return nil, &HandlerSpecError{Spec: spec, Reason: fmt.Sprintf("URL %q has no host", arg)}
		}
		if client == nil {
			client = defaultHandlerClient()
		}
		return httpHandler(u.String(), client), nil
	case "exec":
		if strings.TrimSpace(arg) == "" {
			return nil, &HandlerSpecError{Spec: spec, Reason: "no command after exec:"}
		}
		return execHandler(arg, ExecKillGrace), nil
	}
	return nil, &HandlerSpecError{Spec: spec, Reason: fmt.Sprintf("unknown kind %q: want http:URL or exec:COMMAND", kind)}
}

// defaultHandlerClient bounds connecting and the TLS handshake; the whole
// request is bounded by the task's timeout through its context.
func defaultHandlerClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// attemptTimeout bounds one attempt of t: its own timeout, or the default
// for tasks stored without one.
func attemptTimeout(t *task.Task) time.Duration {
	if t.Timeout > 0 {
		return t.Timeout.Std()
	}
	return task.DefaultTimeout
}

var errHandlerTimeout = errors.New("handler timed out")

func httpHandler(target string, client *http.Client) entity.HandlerFunc {
	return func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		limit := attemptTimeout(t)
		ctx, cancel := context.WithTimeoutCause(ctx, limit, fmt.Errorf("%w: no response from %s within the task timeout %s", errHandlerTimeout, target, limit))
		defer cancel()
		body, err := json.Marshal(t)
		if err != nil {
			return nil, entity.Permanent(fmt.Errorf("http handler: encode task: %w", err))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			return nil, entity.Permanent(fmt.Errorf("http handler %s: %w", target, err))
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Tenure-Task-Ref", t.Ref())
		req.Header.Set("Tenure-Task-Attempt", strconv.Itoa(t.Attempt))
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
		resp, err := client.Do(req)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return nil, cause
			}
			return nil, fmt.Errorf("http handler: %w", err)
		}
		defer resp.Body.Close()
		got, readErr := io.ReadAll(io.LimitReader(resp.Body, MaxHandlerResult+1))
		code := resp.StatusCode
		switch {
		case code >= 200 && code < 300:
			if readErr != nil {
				if cause := context.Cause(ctx); cause != nil {
					return nil, cause
				}
				return nil, fmt.Errorf("http handler %s: reading the response: %w", target, readErr)
			}
			return result("http handler "+target+": response body", got)
		case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
			return nil, fmt.Errorf("http handler %s: %s (retrying): %s", target, resp.Status, head(got, handlerErrorTail))
		default:
			return nil, entity.Permanent(fmt.Errorf("http handler %s: %s: %s", target, resp.Status, head(got, handlerErrorTail)))
		}
	}
}

// result checks a handler's output: valid JSON of at most MaxHandlerResult
// bytes, surrounding white space trimmed; empty is null. Anything else
// fails the task permanently: running it again would give the same.
func result(what string, out []byte) (json.RawMessage, error) {
	if len(out) > MaxHandlerResult {
		return nil, entity.Permanent(fmt.Errorf("%s is over %d bytes", what, MaxHandlerResult))
	}
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return json.RawMessage("null"), nil
	}
	if !json.Valid(out) {
		return nil, entity.Permanent(fmt.Errorf("%s is not JSON: %s", what, head(out, 80)))
	}
	return json.RawMessage(out), nil
}

// head returns the first n bytes of b as printable text.
func head(b []byte, n int) string {
	if len(b) > n {
		return strconv.Quote(string(b[:n])) + "…"
	}
	return strconv.Quote(string(b))
}

func execHandler(command string, grace time.Duration) entity.HandlerFunc {
	return func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		limit := attemptTimeout(t)
		ctx, cancel := context.WithTimeoutCause(ctx, limit, fmt.Errorf("%w: command still running after the task timeout %s", errHandlerTimeout, limit))
		defer cancel()
		stdout := &capBuffer{max: MaxHandlerResult}
		stderr := &tailBuffer{max: handlerErrorTail}
		cmd := exec.Command("/bin/sh", "-c", command)
		cmd.Stdin = bytes.NewReader(t.Input)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.Env = taskEnv(os.Environ(), t)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// A process that escapes the group (setsid) may hold stdout open:
		// stop waiting for it this long after the command exits.
		cmd.WaitDelay = grace + time.Second
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("exec handler: start /bin/sh: %w", err)
		}
		group := cmd.Process.Pid
		exited := make(chan struct{})
		go func() {
			select {
			case <-exited:
				return
			case <-ctx.Done():
			}
			_ = syscall.Kill(-group, syscall.SIGTERM)
			timer := time.NewTimer(grace)
			defer timer.Stop()
			select {
			case <-exited:
			case <-timer.C:
				_ = syscall.Kill(-group, syscall.SIGKILL)
			}
		}()
		err := cmd.Wait()
		close(exited)
		// Whatever the command left running in its group ends with it.
		_ = syscall.Kill(-group, syscall.SIGKILL)
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		var exitErr *exec.ExitError
		switch {
		case err == nil || errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success():
			if stdout.over {
				return nil, entity.Permanent(fmt.Errorf("exec handler: stdout is over %d bytes", MaxHandlerResult))
			}
			return result("exec handler: stdout", stdout.buf.Bytes())
		case errors.As(err, &exitErr) && exitErr.Exited():
			code := exitErr.ExitCode()
			if code == ExecExitRetry {
				return nil, fmt.Errorf("exec handler: exit status %d (retrying): %s", code, stderr.text())
			}
			return nil, entity.Permanent(fmt.Errorf("exec handler: exit status %d: %s", code, stderr.text()))
		case errors.As(err, &exitErr):
			// Killed by a signal Tenure did not send (OOM killer, an
			// operator): like a crash, worth another attempt.
			return nil, fmt.Errorf("exec handler: %v (retrying): %s", err, stderr.text())
		default:
			return nil, fmt.Errorf("exec handler: %w", err)
		}
	}
}

// taskEnv is the command's environment: the runner's without its TENURE_*
// configuration, plus the task's identity.
func taskEnv(environ []string, t *task.Task) []string {
	env := make([]string, 0, len(environ)+5)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, EnvPrefix) {
			env = append(env, kv)
		}
	}
	return append(env,
		TaskEnvPrefix+"ID="+t.ID,
		TaskEnvPrefix+"REF="+t.Ref(),
		TaskEnvPrefix+"TYPE="+t.Type,
		TaskEnvPrefix+"ENTITY="+t.Entity,
		TaskEnvPrefix+"ATTEMPT="+strconv.Itoa(t.Attempt),
	)
}

// capBuffer keeps the first max bytes written and notes whether there was
// more; it never fails a write, so the command is not killed by EPIPE.
type capBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if len(p) > room {
		c.over = true
	}
	c.buf.Write(p[:min(max(room, 0), len(p))])
	return len(p), nil
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	buf []byte
	max int
	cut bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
		b.cut = true
	}
	return len(p), nil
}

func (b *tailBuffer) text() string {
	s := strings.TrimSpace(string(b.buf))
	if s == "" {
		return "(no stderr)"
	}
	if b.cut {
		return "stderr …" + strconv.Quote(s)
	}
	return "stderr " + strconv.Quote(s)
}

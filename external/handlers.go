package external

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
)

// Handler limits of the http: and exec: handlers.
const (
	// MaxHandlerResult is the largest result an http: response body or an
	// exec: command's stdout may hold (1 MiB); more fails the task
	// permanently, since the result is stored in the task object.
	MaxHandlerResult = 1 << 20
	// handlerErrorTail is how much of a failed handler's output (an http:
	// response body, an exec: command's stderr) the task error keeps.
	handlerErrorTail = 1 << 10
	// ExecKillGrace is how long an exec: command has between SIGTERM and
	// SIGKILL once its task is interrupted (on Unix; see the package doc).
	ExecKillGrace = 2 * time.Second
	// ExecExitRetry is the exit status (EX_TEMPFAIL) by which an exec:
	// command asks for a retry.
	ExecExitRetry = 75
)

// HandlerSpecError reports a handler spec (http:URL, exec:COMMAND, or a
// TYPE=SPEC pair) that cannot be used. It matches runner.ErrInvalidConfig,
// since a spec is part of the runner's configuration.
type HandlerSpecError struct {
	Spec   string // as given
	Reason string
	// For is what the spec is for: "handler" (also when empty) or
	// "singleton".
	For string
}

func (e *HandlerSpecError) Error() string {
	what := e.For
	if what == "" {
		what = "handler"
	}
	return fmt.Sprintf("%v: %s %q: %s", runner.ErrInvalidConfig, what, e.Spec, e.Reason)
}

// Unwrap makes errors.Is(err, runner.ErrInvalidConfig) hold.
func (e *HandlerSpecError) Unwrap() error { return runner.ErrInvalidConfig }

// ParseHandler splits a TYPE=SPEC handler flag.
func ParseHandler(s string) (typ, spec string, err error) { return splitTypeSpec(s, "handler") }

// splitTypeSpec splits a TYPE=SPEC flag of a handler or singleton (what).
func splitTypeSpec(s, what string) (typ, spec string, err error) {
	typ, spec, ok := strings.Cut(s, "=")
	if !ok || typ == "" || spec == "" {
		return "", "", fmt.Errorf("%w: %s %q: want TYPE=SPEC (http:URL or exec:COMMAND)", runner.ErrInvalidConfig, what, s)
	}
	return typ, spec, nil
}

// RegisterHandlers registers the handlers of specs, each "TYPE=SPEC" (see
// ParseHandler and NewHandler), on h. Every spec is checked before any is
// registered, so a bad one leaves h unchanged; a type given twice, naming a
// built-in type (runner.BuiltinTypes) or already registered on h is an
// error naming it.
func RegisterHandlers(h *entity.Host, specs []string) error {
	registered := h.Types()
	taken := func(typ string) string {
		switch {
		case slices.Contains(runner.BuiltinTypes(), typ):
			return fmt.Sprintf("type %q is built in and cannot be overridden", typ)
		case slices.Contains(registered, typ):
			return fmt.Sprintf("type %q is already registered on this host", typ)
		}
		return ""
	}
	build := func(_, spec string) (entity.HandlerFunc, error) { return NewHandler(spec, nil) }
	return registerAll(specs, "handler", taken, build, h.RegisterFunc)
}

// registerAll checks every TYPE=SPEC of specs (for what: "handler" or
// "singleton"), then registers them all, so that a bad spec registers
// none: the type must be valid, given once, and not taken (a reason, or
// ""); build makes what register registers.
func registerAll[F any](specs []string, what string, taken func(typ string) string,
	build func(typ, spec string) (F, error), register func(typ string, f F) error) error {
	type pending struct {
		typ string
		f   F
	}
	var all []pending
	seen := map[string]string{}
	for _, s := range specs {
		typ, spec, err := splitTypeSpec(s, what)
		if err != nil {
			return err
		}
		bad := func(reason string) error { return &HandlerSpecError{Spec: s, Reason: reason, For: what} }
		if err := task.ValidateType(typ); err != nil {
			return bad(err.Error())
		}
		if prev, dup := seen[typ]; dup {
			return bad(fmt.Sprintf("type %q already has a %s (%q)", typ, what, prev))
		}
		if reason := taken(typ); reason != "" {
			return bad(reason)
		}
		seen[typ] = s
		f, err := build(typ, spec)
		if err != nil {
			return fmt.Errorf("type %s: %w", typ, err)
		}
		all = append(all, pending{typ, f})
	}
	for _, p := range all {
		if err := register(p.typ, p.f); err != nil {
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
// exec:COMMAND runs COMMAND through /bin/sh -c (cmd.exe /C on Windows) in
// a process group of its own (on Unix), with the task input on stdin and
// the runner's environment (minus its TENURE_* configuration, which may
// hold credentials) plus TENURE_TASK_ID, TENURE_TASK_REF,
// TENURE_TASK_TYPE, TENURE_TASK_ENTITY and TENURE_TASK_ATTEMPT, and the
// attempt's execute span in TRACEPARENT (with TRACESTATE and BAGGAGE when
// there are any), as the http: handler's traceparent header. Config
// loading ignores those (runner.TaskEnvPrefix), so the command may itself
// run `tenure task submit` (given a config file: the runner's TENURE_*
// configuration is not passed on). Exit status 0 completes the task with
// stdout as its result (JSON of at most MaxHandlerResult bytes; empty is
// null); 75 (EX_TEMPFAIL) asks for a retry; any other status fails it
// permanently with the last KiB of stderr. When the task is interrupted the
// group gets SIGTERM, then SIGKILL after ExecKillGrace; processes the
// command leaves behind in its group are killed when it exits. (Elsewhere
// than on Unix, see the package doc.)
//
// A spec that does not parse gives a *HandlerSpecError naming it.
func NewHandler(spec string, client *http.Client) (entity.HandlerFunc, error) {
	p, err := parseSpec(spec, "handler")
	if err != nil {
		return nil, err
	}
	if p.command != "" {
		return execHandler(p.command, ExecKillGrace), nil
	}
	if client == nil {
		client = defaultHandlerClient()
	}
	return httpHandler(p.url, client), nil
}

// parsedSpec is an http:URL (url set) or exec:COMMAND (command set) spec.
type parsedSpec struct {
	url, command string
}

// parseSpec checks an http:URL or exec:COMMAND spec of a handler or
// singleton (what).
func parseSpec(spec, what string) (parsedSpec, error) {
	bad := func(reason string) (parsedSpec, error) {
		return parsedSpec{}, &HandlerSpecError{Spec: spec, Reason: reason, For: what}
	}
	kind, arg, ok := strings.Cut(spec, ":")
	if !ok {
		return bad("want http:URL or exec:COMMAND")
	}
	switch kind {
	case "http":
		u, err := url.Parse(arg)
		switch {
		case arg == "":
			return bad("no URL after http:")
		case err != nil:
			return bad(fmt.Sprintf("URL does not parse: %v", err))
		case u.Scheme != "http" && u.Scheme != "https":
			return bad(fmt.Sprintf("URL %q must start with http:// or https://", arg))
		case u.Host == "":
			return bad(fmt.Sprintf("URL %q has no host", arg))
		}
		return parsedSpec{url: u.String()}, nil
	case "exec":
		if strings.TrimSpace(arg) == "" {
			return bad("no command after exec:")
		}
		return parsedSpec{command: arg}, nil
	}
	return bad(fmt.Sprintf("unknown kind %q: want http:URL or exec:COMMAND", kind))
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

package runner

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/tenurehq/tenure/messaging"
)

// The HTTP + JSON entity calls (POST /v1/entities/{type}/{id} and
// /v1/entities/{type}/{id}/{op}) are the data plane: whoever may make them
// runs application code. They take a credential of their own, never the
// admin one (call.http.token or call.http.token_file), or a client
// certificate the admin server verified (admin.client_ca_file); or none
// when call.http.open says so. A runner with neither refuses every call
// (401), saying how to configure it: an endpoint reached by mistake is
// closed, not open. The whole /v1/entities/ prefix goes through the check,
// so a route added under it is covered too.

// CallAuthorizer decides whether an authenticated HTTP entity call may run:
// r is the request (its TLS state and headers: the caller), typ and id
// name the entity, op the operation ("" for the type's default). A non-nil
// error refuses the call with 403 and the error's message; the entity's
// handler does not run. It is consulted after the credential check, for
// every call, and must be safe for concurrent use.
type CallAuthorizer func(r *http.Request, typ, id, op string) error

// WithCallAuthorizer has every HTTP entity call (POST /v1/entities/...)
// that passed the credential check (call.http) decided by authorize, per
// type, entity and operation. Calls over gRPC (runner to runner, the Go
// client, `tenure call`) do not go through it: they are secured by
// call.tls.
func WithCallAuthorizer(authorize CallAuthorizer) Option {
	return func(r *Runner) { r.authorize = authorize }
}

// entitiesPrefix is the path every HTTP entity call starts with.
const entitiesPrefix = "/v1/entities/"

// callAuth guards the HTTP entity calls.
type callAuth struct {
	open      bool
	token     *fileToken
	mtls      bool // the admin server verifies client certificates
	authorize CallAuthorizer
}

func newCallAuth(cfg Config, authorize CallAuthorizer, log *slog.Logger) *callAuth {
	h := cfg.Call.HTTP
	return &callAuth{
		open:      h.Open,
		token:     &fileToken{key: "call.http.token_file", token: h.Token, file: h.TokenFile, log: log},
		mtls:      cfg.Admin.ClientCAFile != "" && cfg.Admin.CertFile != "",
		authorize: authorize,
	}
}

// require wraps h (the entity call handler) so that it runs only for a
// call with the data-plane credential that the authorizer, if any,
// accepts: 401 with a Bearer challenge without the credential (or when
// none is configured), 403 when the authorizer refuses, 404 for a path
// that names no entity when an authorizer must decide. Refusals are
// messaging.ErrorBody JSON, as the endpoint's other errors, with applied
// "no": the handler did not run.
func (a *callAuth) require(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if ok, status, msg := a.authenticate(req); !ok {
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tenure entity calls"`)
			}
			refuse(w, status, msg)
			return
		}
		if a.authorize != nil {
			typ, id, op, ok := entityPath(req)
			if !ok {
				refuse(w, http.StatusNotFound, "entity calls: "+req.URL.Path+": want POST /v1/entities/{type}/{id}[/{op}]")
				return
			}
			if err := a.authorize(req, typ, id, op); err != nil {
				refuse(w, http.StatusForbidden, "entity calls: "+req.URL.Path+" refused: "+err.Error())
				return
			}
		}
		h.ServeHTTP(w, req)
	})
}

// authenticate checks the request's credential; when it fails, it returns
// the status and message of the refusal.
func (a *callAuth) authenticate(req *http.Request) (ok bool, status int, msg string) {
	if a.open {
		return true, 0, ""
	}
	if !a.token.configured() && !a.mtls {
		return false, http.StatusUnauthorized, "entity calls over HTTP are refused: no credential configured on this runner; set call.http.token " +
			"(or call.http.token_file, TENURE_CALL_HTTP_TOKEN) and send it as Authorization: Bearer, or admin.client_ca_file for client certificates, " +
			"or call.http.open: true to serve them to anyone who reaches the admin address"
	}
	if a.mtls && req.TLS != nil && len(req.TLS.VerifiedChains) > 0 {
		return true, 0, ""
	}
	if a.token.configured() {
		match, err := bearerMatches(req, a.token)
		if err != nil {
			return false, http.StatusInternalServerError, "entity calls: " + err.Error()
		}
		if match {
			return true, 0, ""
		}
	}
	need := "Authorization: Bearer <call.http.token>"
	switch {
	case a.mtls && a.token.configured():
		need += " or a client certificate verified by admin.client_ca_file"
	case a.mtls:
		need = "a client certificate verified by admin.client_ca_file"
	}
	return false, http.StatusUnauthorized, "entity calls: " + req.URL.Path + " needs " + need
}

// refuse writes a refusal as the endpoint's error body.
func refuse(w http.ResponseWriter, status int, msg string) {
	code := "forbidden"
	switch status {
	case http.StatusUnauthorized:
		code = "unauthorized"
	case http.StatusNotFound:
		code = "not_found"
	case http.StatusInternalServerError:
		code = "error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(messaging.ErrorBody{Error: msg, Code: code, Applied: messaging.AppliedNo.String()})
}

// entityPath splits /v1/entities/{type}/{id}[/{op}] as the mux's patterns
// do: by the escaped path's segments, each unescaped.
func entityPath(req *http.Request) (typ, id, op string, ok bool) {
	rest, found := strings.CutPrefix(req.URL.EscapedPath(), entitiesPrefix)
	if !found {
		return "", "", "", false
	}
	segs := strings.Split(rest, "/")
	if len(segs) < 2 || len(segs) > 3 {
		return "", "", "", false
	}
	out := make([]string, 3)
	for i, s := range segs {
		v, err := url.PathUnescape(s)
		if err != nil || v == "" {
			return "", "", "", false
		}
		out[i] = v
	}
	return out[0], out[1], out[2], true
}

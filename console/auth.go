package console

import (
	"context"
	"fmt"
	"net/http"
)

// Access: the session endpoint is open; the shape views are open unless
// Deps.ProtectReads; user data and actions need the admin credential,
// and are refused with 403 by a runner that has none configured (as POST
// /admin/drain is).

// Auth decides whether a request carries the admin credential.
type Auth interface {
	// Configured reports whether the runner has any admin credential
	// configured (a token, a client CA): without one, every endpoint that
	// needs it is refused with 403.
	Configured() bool
	// Authorized reports whether the request carries a valid credential.
	Authorized(r *http.Request) (bool, error)
}

// access is who may reach an endpoint.
type access int

const (
	open   access = iota // anyone
	shape                // anyone, unless ProtectReads
	secret               // the admin credential: user data and actions
)

// allow checks the request against the endpoint's access rule.
func (a *API) allow(r *http.Request, acc access) error {
	if acc == open || (acc == shape && !a.d.ProtectReads) {
		return nil
	}
	what := "user data and actions"
	if acc == shape {
		what = "every view (admin.protect_reads is set)"
	}
	if !a.d.Auth.Configured() {
		return NewError(http.StatusForbidden, CodeForbidden, fmt.Errorf(
			"%s %s refused: %s need the admin credential, and this runner has none configured; set admin.token (or admin.token_file, TENURE_ADMIN_TOKEN) or admin.client_ca_file",
			r.Method, r.URL.Path, what))
	}
	ok, err := a.d.Auth.Authorized(r)
	if err != nil {
		return fmt.Errorf("console: checking the admin credential: %w", err)
	}
	if !ok {
		return NewError(http.StatusUnauthorized, CodeUnauthorized, fmt.Errorf(
			"%s %s: %s need the admin credential: send Authorization: Bearer <admin.token>", r.Method, r.URL.Path, what))
	}
	return nil
}

// authorized reports whether the request carries a valid credential,
// for the parts of an open view that need one.
func (a *API) authorized(r *http.Request) bool {
	if !a.d.Auth.Configured() {
		return false
	}
	ok, err := a.d.Auth.Authorized(r)
	return ok && err == nil
}

// sessionView is GET session.
type sessionView struct {
	AuthConfigured bool   `json:"auth_configured"`
	ProtectReads   bool   `json:"protect_reads"`
	Authorized     bool   `json:"authorized"`
	RunnerID       string `json:"runner_id"`
	Cluster        string `json:"cluster"`
	Version        string `json:"version"`
}

func (a *API) session(_ context.Context, w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, sessionView{AuthConfigured: a.d.Auth.Configured(), ProtectReads: a.d.ProtectReads,
		Authorized: a.authorized(r), RunnerID: a.d.RunnerID, Cluster: a.d.Cluster, Version: a.d.Version})
	return nil
}

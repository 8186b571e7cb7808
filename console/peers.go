package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/storage"
)

// Peers reaches runners' admin endpoints. The runner's implementation
// answers for itself without the network and asks the others with
// HTTPPeers.
type Peers interface {
	// Status is the runner's GET /debug/status.
	Status(ctx context.Context, r storage.RunnerInfo) (RunnerStatus, error)
	// Timeline is the runner's GET /debug/timeline: its events since.
	Timeline(ctx context.Context, r storage.RunnerInfo, since time.Time) ([]Event, error)
	// Resident is the runner's GET /debug/shards/{group}/{index}/resident.
	Resident(ctx context.Context, r storage.RunnerInfo, shard storage.ShardID) (ResidentReply, error)
	// Drain is the runner's POST /admin/drain: it starts a drain.
	Drain(ctx context.Context, r storage.RunnerInfo) error
}

// ResidentReply is GET /debug/shards/{group}/{index}/resident: the entity
// instances resident on the runner for the shard.
type ResidentReply struct {
	Shard  string `json:"shard"`
	Runner string `json:"runner"`
	// Owned says whether the runner runs the shard now; when it does not
	// (it moved), Resident is empty.
	Owned     bool                    `json:"owned"`
	Resident  []entity.ResidentEntity `json:"resident"`
	Truncated bool                    `json:"truncated"` // more than the reply's limit are resident
}

// MaxResidentListed bounds the resident entities a reply lists.
const MaxResidentListed = 1000

// HTTPPeers reaches runners' admin endpoints over HTTP(S) at the address
// they registered, with the serving runner's admin credential on every
// request (the runners need it for the user-data endpoints and, with
// admin.protect_reads, for every one). Each request is bounded: a status
// or a timeline by StatusTimeout, the rest by ActionTimeout.
type HTTPPeers struct {
	// Client makes the requests; its transport carries the admin TLS
	// (runner.AdminTLSClientConfig). Default http.DefaultClient.
	Client *http.Client
	// Token returns the admin bearer token ("" sends none).
	Token func() (string, error)
	// UserAgent names the caller.
	UserAgent     string
	StatusTimeout time.Duration // default PeerStatusTimeout
	ActionTimeout time.Duration // default PeerActionTimeout
}

// AdminURL joins a runner's registered admin address ("host:port", or a
// URL with its scheme) and a path.
func AdminURL(addr, path string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimSuffix(addr, "/") + path
}

// Status implements Peers.
func (p *HTTPPeers) Status(ctx context.Context, r storage.RunnerInfo) (RunnerStatus, error) {
	b, err := p.do(ctx, p.statusTimeout(), http.MethodGet, r, "/debug/status")
	if err != nil {
		return RunnerStatus{}, err
	}
	return DecodeStatus(b)
}

// Timeline implements Peers.
func (p *HTTPPeers) Timeline(ctx context.Context, r storage.RunnerInfo, since time.Time) ([]Event, error) {
	path := "/debug/timeline"
	if !since.IsZero() {
		path += "?since=" + url.QueryEscape(since.UTC().Format(time.RFC3339Nano))
	}
	b, err := p.do(ctx, p.statusTimeout(), http.MethodGet, r, path)
	if err != nil {
		return nil, err
	}
	var tl TimelineReply
	if err := json.Unmarshal(b, &tl); err != nil {
		return nil, fmt.Errorf("runner %s: GET /debug/timeline: not a timeline: %w", r.ID, err)
	}
	for i := range tl.Events {
		if tl.Events[i].Runner == "" {
			tl.Events[i].Runner = r.ID
		}
	}
	return tl.Events, nil
}

// Resident implements Peers.
func (p *HTTPPeers) Resident(ctx context.Context, r storage.RunnerInfo, shard storage.ShardID) (ResidentReply, error) {
	b, err := p.do(ctx, p.statusTimeout(), http.MethodGet, r,
		"/debug/shards/"+url.PathEscape(shard.Group)+"/"+strconv.Itoa(shard.Index)+"/resident")
	if err != nil {
		return ResidentReply{}, err
	}
	var rr ResidentReply
	if err := json.Unmarshal(b, &rr); err != nil {
		return ResidentReply{}, fmt.Errorf("runner %s: resident entities of %s: not a listing: %w", r.ID, shard, err)
	}
	return rr, nil
}

// Drain implements Peers.
func (p *HTTPPeers) Drain(ctx context.Context, r storage.RunnerInfo) error {
	_, err := p.do(ctx, p.actionTimeout(), http.MethodPost, r, "/admin/drain")
	return err
}

func (p *HTTPPeers) statusTimeout() time.Duration {
	if p.StatusTimeout > 0 {
		return p.StatusTimeout
	}
	return PeerStatusTimeout
}

func (p *HTTPPeers) actionTimeout() time.Duration {
	if p.ActionTimeout > 0 {
		return p.ActionTimeout
	}
	return PeerActionTimeout
}

// do makes one request to runner r, bounded by timeout; a status other
// than 2xx is an error quoting the start of the body (ErrPeerAuth for 401
// and 403).
func (p *HTTPPeers) do(ctx context.Context, timeout time.Duration, method string, r storage.RunnerInfo, path string) ([]byte, error) {
	if r.Addr == "" {
		return nil, fmt.Errorf("runner %s registered no admin address", r.ID)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := AdminURL(r.Addr, path)
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("runner %s: %w", r.ID, err)
	}
	if p.UserAgent != "" {
		req.Header.Set("User-Agent", p.UserAgent)
	}
	if p.Token != nil {
		tok, err := p.Token()
		if err != nil {
			return nil, err
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	hc := p.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("runner %s: %w", r.ID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("runner %s: %s %s: reading the answer: %w", r.ID, method, u, err)
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return nil, fmt.Errorf("runner %s: %s %s: %s: %s: %w", r.ID, method, u, resp.Status, msg, ErrPeerAuth)
		}
		return nil, fmt.Errorf("runner %s: %s %s: %s: %s", r.ID, method, u, resp.Status, msg)
	}
	return body, nil
}

// statuses asks every runner for its status at once; the error of one
// that did not answer is kept instead.
func statuses(ctx context.Context, p Peers, runners []storage.RunnerInfo) ([]RunnerStatus, []error) {
	sts := make([]RunnerStatus, len(runners))
	errs := make([]error, len(runners))
	var wg sync.WaitGroup
	for i, r := range runners {
		wg.Go(func() { sts[i], errs[i] = p.Status(ctx, r) })
	}
	wg.Wait()
	return sts, errs
}

// RunnerStatus is what a runner's GET /debug/status reports, decoded
// leniently (DecodeStatus): each field on its own, an absent or malformed
// one left zero (nil for the pointers), so that runners of other versions
// still show what they can.
type RunnerStatus struct {
	RunnerID         string
	Version          string
	StartedAt        string
	Attached         *bool
	Mode             string
	DetachReason     string
	LeaseDeadlineLag *float64
	Draining         bool
	Weight           *float64
	Owned            *int
	ConfigVersion    *int64
	ConfigCanary     bool
	ConfigError      string
	ConfigRevision   *int64 // the coordination backend's revision of the latest document it read (nil from runners that do not report it)
	StaticConfig     map[string]string
	Types            []string
	HasTypes         bool // the runner reported its types (older ones do not)
	Singletons       []entity.SingletonStatus
	// UnhandledTypes are the types of due tasks it left pending lately for
	// want of a handler (none from runners that do not report them).
	UnhandledTypes   []string
	ResidentEntities *int
	CallsPerSecond   *float64
	TasksPerSecond   *float64
	RolloutBucket    *int
}

// DecodeStatus decodes a GET /debug/status answer (see RunnerStatus).
func DecodeStatus(b []byte) (RunnerStatus, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return RunnerStatus{}, fmt.Errorf("status is not a JSON object: %w", err)
	}
	var st RunnerStatus
	st.RunnerID = deref(field[string](raw, "runner_id"))
	st.Version = deref(field[string](raw, "version"))
	st.StartedAt = deref(field[string](raw, "started_at"))
	st.Attached = field[bool](raw, "attached")
	st.Mode = deref(field[string](raw, "mode"))
	st.DetachReason = deref(field[string](raw, "detach_reason"))
	st.LeaseDeadlineLag = field[float64](raw, "lease_deadline_lag_seconds")
	st.Draining = deref(field[bool](raw, "draining"))
	st.Weight = field[float64](raw, "weight")
	st.Owned = field[int](raw, "owned")
	st.ConfigVersion = field[int64](raw, "config_version")
	st.ConfigCanary = deref(field[bool](raw, "config_canary"))
	st.ConfigError = deref(field[string](raw, "config_error"))
	st.ConfigRevision = field[int64](raw, "config_revision")
	st.StaticConfig = deref(field[map[string]string](raw, "static_config"))
	if types := field[[]string](raw, "types"); types != nil {
		st.Types, st.HasTypes = *types, true
	}
	st.UnhandledTypes = deref(field[[]string](raw, "unhandled_types"))
	st.Singletons = deref(field[[]entity.SingletonStatus](raw, "singletons"))
	st.ResidentEntities = field[int](raw, "resident_entities")
	st.CallsPerSecond = field[float64](raw, "calls_per_second")
	st.TasksPerSecond = field[float64](raw, "tasks_per_second")
	st.RolloutBucket = field[int](raw, "rollout_bucket")
	return st, nil
}

func field[T any](raw map[string]json.RawMessage, key string) *T {
	b, ok := raw[key]
	if !ok || string(b) == "null" {
		return nil
	}
	var v T
	if json.Unmarshal(b, &v) != nil {
		return nil
	}
	return &v
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

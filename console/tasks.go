package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// Task list bounds.
const (
	DefaultTaskLimit = 100
	MaxTaskLimit     = storage.MaxListLimit
)

// taskRow is one task of GET tasks.
type taskRow struct {
	Ref        string  `json:"ref"`
	ID         string  `json:"id"`
	Type       string  `json:"type"`
	Entity     string  `json:"entity"`
	Op         string  `json:"op"`
	Status     string  `json:"status"`
	Attempt    int     `json:"attempt"`
	CreatedAt  string  `json:"created_at"`
	UpdatedAt  string  `json:"updated_at"`
	AgeSeconds float64 `json:"age_seconds"` // since created_at, by the serving runner's clock
	Error      string  `json:"error,omitempty"`
}

// taskListView is GET tasks.
type taskListView struct {
	Tasks []taskRow `json:"tasks"`
	// Next resumes the listing (pass it as after); "" at the end. A page
	// may hold fewer than limit tasks and still have a next: the listing
	// reads a bounded number of task objects per page.
	Next string `json:"next"`
}

// taskQuery is GET tasks' parameters, checked.
type taskQuery struct {
	opts      task.ListOptions
	entity    string
	group     string
	olderThan time.Duration
}

func (a *API) parseTaskQuery(ctx context.Context, r *http.Request) (taskQuery, error) {
	q := r.URL.Query()
	var tq taskQuery
	if s := q.Get("status"); s != "" {
		st := task.Status(s)
		if !st.Valid() {
			return tq, badRequest("status", "%q is not a task status (pending, running, completed, failed, cancelled)", s)
		}
		tq.opts.Status = st
	}
	if s := q.Get("type"); s != "" {
		if err := task.ValidateType(s); err != nil {
			return tq, badRequest("type", "%v", err)
		}
		tq.opts.Type = s
	}
	if s := q.Get("entity"); s != "" {
		if err := task.ValidateEntity(s); err != nil {
			return tq, badRequest("entity", "%v", err)
		}
		tq.entity = s
	}
	if s := q.Get("older_than"); s != "" {
		secs, err := strconv.ParseFloat(s, 64)
		if err != nil || secs < 0 || secs > 1e9 {
			return tq, badRequest("older_than", "%q: want a number of seconds ≥ 0", s)
		}
		tq.olderThan = time.Duration(secs * float64(time.Second))
	}
	tq.opts.Limit = DefaultTaskLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxTaskLimit {
			return tq, badRequest("limit", "%q: want 1 to %d", s, MaxTaskLimit)
		}
		tq.opts.Limit = n
	}
	tq.opts.After = q.Get("after")
	if s := q.Get("group"); s != "" {
		meta, err := a.meta(ctx)
		if err != nil {
			return tq, err
		}
		if tq.group, err = group(meta, "group", s); err != nil {
			return tq, err
		}
		// A type and an entity name one shard: list only it.
		if tq.opts.Type != "" && tq.entity != "" {
			sh := task.ShardOf(tq.group, meta.Shards, tq.opts.Type, tq.entity, "")
			tq.opts.Shard = &sh
		}
	}
	return tq, nil
}

// taskList lists tasks in key order, filtered (status and type by the
// listing, entity, group and age here).
func (a *API) taskList(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	if a.d.Tasks == nil {
		return notAvailable("tasks")
	}
	tq, err := a.parseTaskQuery(ctx, r)
	if err != nil {
		return err
	}
	list, next, err := a.d.Tasks.List(ctx, tq.opts)
	if err != nil {
		return taskError("listing tasks", err)
	}
	now := a.d.Now()
	v := taskListView{Tasks: []taskRow{}, Next: next}
	for _, t := range list {
		age := now.Sub(t.CreatedAt)
		switch {
		case tq.entity != "" && t.Entity != tq.entity:
			continue
		case tq.group != "" && t.Shard.Group != tq.group:
			continue
		case tq.olderThan > 0 && age < tq.olderThan:
			continue
		}
		v.Tasks = append(v.Tasks, taskRow{Ref: t.Ref(), ID: t.ID, Type: t.Type, Entity: t.Entity, Op: t.Op, Status: string(t.Status),
			Attempt: t.Attempt, CreatedAt: utc(t.CreatedAt), UpdatedAt: utc(t.UpdatedAt), AgeSeconds: age.Seconds(), Error: t.Error})
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// taskRef reads {group}/{shard}/{id}: a task ref.
func taskRef(r *http.Request) (string, error) {
	ref := r.PathValue("group") + "/" + r.PathValue("shard") + "/" + r.PathValue("id")
	if _, _, err := task.ParseRef(ref); err != nil {
		return "", badRequest("ref", "%v", err)
	}
	return ref, nil
}

// taskError answers a task client's error by its kind.
func taskError(what string, err error) error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, task.ErrNotFound):
		return NewError(http.StatusNotFound, CodeNotFound, fmt.Errorf("%s: %w", what, err))
	case errors.Is(err, task.ErrInvalid), errors.Is(err, task.ErrMalformedKey):
		return NewError(http.StatusBadRequest, CodeBadRequest, fmt.Errorf("%s: %w", what, err))
	case errors.Is(err, task.ErrTerminal), errors.Is(err, task.ErrInvalidTransition), errors.Is(err, task.ErrPurging),
		errors.Is(err, task.ErrContention):
		return NewError(http.StatusConflict, CodeConflict, fmt.Errorf("%s: %w", what, err))
	case errors.Is(err, task.ErrCorrupt):
		return NewError(http.StatusUnprocessableEntity, CodeConflict, fmt.Errorf("%s: %w", what, err))
	}
	return unavailable(what, err)
}

func (a *API) taskGet(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	return a.taskDo(ctx, w, r, "reading task", func(ctx context.Context, ref string) (*task.Task, error) { return a.d.Tasks.Get(ctx, ref) })
}

func (a *API) taskReplay(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	return a.taskDo(ctx, w, r, "replaying task", func(ctx context.Context, ref string) (*task.Task, error) { return a.d.Tasks.Replay(ctx, ref) })
}

func (a *API) taskCancel(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	return a.taskDo(ctx, w, r, "cancelling task", func(ctx context.Context, ref string) (*task.Task, error) { return a.d.Tasks.Cancel(ctx, ref) })
}

// taskDo runs op on the task of the path and answers the task it returns.
func (a *API) taskDo(ctx context.Context, w http.ResponseWriter, r *http.Request, what string, op func(context.Context, string) (*task.Task, error)) error {
	if a.d.Tasks == nil {
		return notAvailable("tasks")
	}
	ref, err := taskRef(r)
	if err != nil {
		return err
	}
	t, err := op(ctx, ref)
	if err != nil {
		return taskError(what+" "+ref, err)
	}
	writeJSON(w, http.StatusOK, task.WithRef{T: t})
	return nil
}

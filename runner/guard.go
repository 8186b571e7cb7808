package runner

import (
	"context"

	"github.com/tenurehq/tenure/storage"
)

// guardedObjects is a Client's view of an object store: every call first
// asks check, which fails once the client is closed or the runner whose
// connections it shares has stopped. The check sits under the task client
// rather than in front of it, so that every task.Client call, including
// those a Client does not wrap (Store, Purge), reports ErrClientClosed or
// ErrStopped instead of working on, or failing on a closed connection.
type guardedObjects struct {
	obj   storage.ObjectStore
	check func() error
}

var _ storage.ObjectStore = guardedObjects{}

func (g guardedObjects) Create(ctx context.Context, key string, body []byte) (string, error) {
	if err := g.check(); err != nil {
		return "", err
	}
	return g.obj.Create(ctx, key, body)
}

func (g guardedObjects) Replace(ctx context.Context, key string, body []byte, ifMatch string) (string, error) {
	if err := g.check(); err != nil {
		return "", err
	}
	return g.obj.Replace(ctx, key, body, ifMatch)
}

func (g guardedObjects) Put(ctx context.Context, key string, body []byte) (string, error) {
	if err := g.check(); err != nil {
		return "", err
	}
	return g.obj.Put(ctx, key, body)
}

func (g guardedObjects) Get(ctx context.Context, key string) (storage.Object, error) {
	if err := g.check(); err != nil {
		return storage.Object{}, err
	}
	return g.obj.Get(ctx, key)
}

func (g guardedObjects) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if err := g.check(); err != nil {
		return storage.ObjectInfo{}, err
	}
	return g.obj.Head(ctx, key)
}

func (g guardedObjects) Delete(ctx context.Context, key string) error {
	if err := g.check(); err != nil {
		return err
	}
	return g.obj.Delete(ctx, key)
}

func (g guardedObjects) DeleteIfMatch(ctx context.Context, key, ifMatch string) error {
	if err := g.check(); err != nil {
		return err
	}
	return g.obj.DeleteIfMatch(ctx, key, ifMatch)
}

func (g guardedObjects) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListPage, error) {
	if err := g.check(); err != nil {
		return storage.ListPage{}, err
	}
	return g.obj.List(ctx, prefix, opts)
}

func (g guardedObjects) ServerTime(ctx context.Context) (storage.ServerTime, error) {
	if err := g.check(); err != nil {
		return storage.ServerTime{}, err
	}
	return g.obj.ServerTime(ctx)
}

// guardedWaker is a Client's waker, checked as guardedObjects is.
type guardedWaker struct {
	w     storage.Waker
	check func() error
}

func (g guardedWaker) Wake(ctx context.Context, shard storage.ShardID, note string) error {
	if err := g.check(); err != nil {
		return err
	}
	return g.w.Wake(ctx, shard, note)
}

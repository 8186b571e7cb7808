package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/storage"
)

// Config returns the dynamic config document; the zero value when absent.
func (s *Store) Config(ctx context.Context) (storage.ConfigValue, error) {
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.opts.prefix+configKey)
	if err != nil {
		return storage.ConfigValue{}, s.opError("get config", configKey, ctx, s.opts.requestTimeout, err)
	}
	if len(resp.Kvs) == 0 {
		return storage.ConfigValue{}, nil
	}
	kv := resp.Kvs[0]
	return storage.ConfigValue{Value: kv.Value, Revision: kv.ModRevision}, nil
}

// PutConfig writes the dynamic config document if its modification revision
// is prevRevision (0: it must not exist yet) and returns the new revision;
// otherwise storage.ErrPrecondition.
func (s *Store) PutConfig(ctx context.Context, value []byte, prevRevision int64) (int64, error) {
	key := s.opts.prefix + configKey
	cctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", prevRevision)).
		Then(clientv3.OpPut(key, string(value))).
		Commit()
	if err != nil {
		return 0, s.opError("put config", configKey, ctx, s.opts.requestTimeout, err)
	}
	if !resp.Succeeded {
		return 0, s.opError("put config", configKey, ctx, 0, storage.ErrPrecondition)
	}
	return resp.Header.Revision, nil
}

// WatchConfig streams changes to the config key, starting with its current
// value when present.
func (s *Store) WatchConfig(ctx context.Context) <-chan storage.ConfigEvent {
	out := make(chan storage.ConfigEvent, 4)
	s.watch(ctx, configKey, "", false, each(func(ctx context.Context, c change) bool {
		ev := storage.ConfigEvent{Kind: c.kind, Revision: c.rev, Resync: c.resync}
		if c.kind == storage.EventPut {
			ev.Value = storage.ConfigValue{Value: c.kv.Value, Revision: c.kv.ModRevision}
		}
		return send(ctx, out, ev)
	}), func() { close(out) })
	return out
}

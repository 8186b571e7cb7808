package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurehq/tenure/storage"
)

// AcquireShards tries to lock every shard for the session's lease. Shards go
// to etcd in transactions of up to the configured batch, each shard its own
// nested transaction (create-if-absent, else read the holder), with a bounded
// number of transactions in flight; so acquiring 256 shards costs a handful
// of round trips, not 256.
func (ss *Session) AcquireShards(ctx context.Context, shards []storage.ShardID) ([]storage.AcquireResult, error) {
	if err := ss.alive(); err != nil {
		return nil, ss.s.opError("acquire", shardsPrefix, ctx, 0, err)
	}
	val, err := json.Marshal(lockRecord{RunnerID: ss.id, AcquiredAt: time.Now().UTC()})
	if err != nil {
		return nil, ss.s.opError("acquire", shardsPrefix, ctx, 0, err)
	}
	results := make([]storage.AcquireResult, len(shards))
	// Deduplicate: etcd refuses a transaction that names a key twice.
	first := map[storage.ShardID]int{}
	var todo []int
	for i, sh := range shards {
		results[i].Shard = sh
		if err := validateShard(sh); err != nil {
			results[i].Status, results[i].Err = storage.Failed, ss.s.opError("acquire", shardKey(sh), ctx, 0, err)
			continue
		}
		if _, dup := first[sh]; dup {
			continue
		}
		first[sh] = i
		todo = append(todo, i)
	}

	sem := make(chan struct{}, ss.s.opts.acquireConcurrency)
	var wg sync.WaitGroup
	for start := 0; start < len(todo); start += ss.s.opts.acquireBatch {
		batch := todo[start:min(start+ss.s.opts.acquireBatch, len(todo))]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ss.acquireBatch(ctx, string(val), batch, results)
		}()
	}
	wg.Wait()
	for i, sh := range shards {
		if j := first[sh]; j != i && results[i].Status == 0 {
			results[i] = results[j]
		}
	}
	return results, nil
}

// acquireBatch runs one transaction for the shards at indexes idx, writing
// their outcomes into results.
func (ss *Session) acquireBatch(ctx context.Context, val string, idx []int, results []storage.AcquireResult) {
	ops := make([]clientv3.Op, len(idx))
	for n, i := range idx {
		k := ss.s.opts.prefix + shardKey(results[i].Shard)
		ops[n] = clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(k, val, clientv3.WithLease(ss.lease))},
			[]clientv3.Op{clientv3.OpGet(k)},
		)
	}
	cctx, cancel := ss.s.withTimeout(ctx)
	defer cancel()
	resp, err := ss.s.cli.Txn(cctx).Then(ops...).Commit()
	if err != nil {
		for _, i := range idx {
			results[i].Status = storage.Failed
			results[i].Err = ss.s.opError("acquire", shardKey(results[i].Shard), ctx, ss.s.opts.requestTimeout, err)
		}
		return
	}
	for n, i := range idx {
		r := &results[i]
		tr := resp.Responses[n].GetResponseTxn()
		if tr.GetSucceeded() {
			// Every write of a transaction lands at its revision, which is
			// therefore the new key's CreateRevision: the epoch.
			r.Status, r.Epoch = storage.Acquired, resp.Header.Revision
			continue
		}
		var kv *mvccpb.KeyValue
		if rs := tr.GetResponses(); len(rs) > 0 {
			if kvs := rs[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
				kv = kvs[0]
			}
		}
		switch {
		case kv == nil:
			r.Status = storage.Failed
			r.Err = ss.s.opError("acquire", shardKey(r.Shard), ctx, 0, fmt.Errorf("%w: lock neither created nor readable", storage.ErrUnavailable))
		case clientv3.LeaseID(kv.Lease) == ss.lease:
			r.Status, r.Epoch = storage.Acquired, kv.CreateRevision
		default:
			r.Status, r.Holder = storage.Held, holderOf(kv)
		}
	}
}

// holderOf names a lock's holder, tolerating a corrupt record.
func holderOf(kv *mvccpb.KeyValue) string {
	var rec lockRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.RunnerID == "" {
		return fmt.Sprintf("lease %x", kv.Lease)
	}
	return rec.RunnerID
}

// VerifyShards checks with one range read of shards/ which of the given
// shards are still locked by this session's lease.
func (ss *Session) VerifyShards(ctx context.Context, shards []storage.ShardID) ([]storage.VerifyResult, error) {
	if err := ss.alive(); err != nil {
		return nil, ss.s.opError("verify", shardsPrefix, ctx, 0, err)
	}
	cctx, cancel := ss.s.withTimeout(ctx)
	defer cancel()
	resp, err := ss.s.cli.Get(cctx, ss.s.opts.prefix+shardsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, ss.s.opError("verify", shardsPrefix, ctx, ss.s.opts.requestTimeout, err)
	}
	held := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		held[ss.s.rel(kv.Key)] = kv
	}
	out := make([]storage.VerifyResult, len(shards))
	for i, sh := range shards {
		out[i].Shard = sh
		kv := held[shardKey(sh)]
		switch {
		case kv == nil:
		case clientv3.LeaseID(kv.Lease) == ss.lease:
			out[i].Owned, out[i].Epoch = true, kv.CreateRevision
		default:
			out[i].Holder = holderOf(kv)
		}
	}
	return out, nil
}

// ReleaseShard deletes the shard's lock if this session's lease holds it.
func (ss *Session) ReleaseShard(ctx context.Context, shard storage.ShardID) error {
	key := shardKey(shard)
	if err := validateShard(shard); err != nil {
		return ss.s.opError("release", key, ctx, 0, err)
	}
	// A released lock is gone whether or not the keep-alive still runs, so
	// release is allowed after Orphan; only a lost lease makes it moot.
	full := ss.s.opts.prefix + key
	cctx, cancel := ss.s.withTimeout(ctx)
	defer cancel()
	resp, err := ss.s.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.LeaseValue(full), "=", ss.lease)).
		Then(clientv3.OpDelete(full)).
		Else(clientv3.OpGet(full)).
		Commit()
	if err != nil {
		return ss.s.opError("release", key, ctx, ss.s.opts.requestTimeout, err)
	}
	if resp.Succeeded {
		return nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return ss.s.opError("release", key, ctx, 0, fmt.Errorf("%w (held by %s)", storage.ErrNotOwner, holderOf(kvs[0])))
	}
	return nil
}

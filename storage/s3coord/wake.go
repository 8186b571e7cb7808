package s3coord

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/storage"
)

// Wake-up tuning.
const (
	// wakeRetention is how long a wake object is kept before a poller
	// deletes it: far longer than any poll interval, so that a watcher
	// whose polls keep succeeding has listed it; a watcher whose polls
	// failed meanwhile is sent a Resync anyway.
	wakeRetention = time.Minute
	// wakeGCPerPoll bounds the deletes one poll makes, so that a backlog
	// of old wake objects never holds a poll up for long.
	wakeGCPerPoll = 64
	// wakeBuffer is a wake watcher's channel capacity; a consumer that
	// falls further behind is sent a Resync instead of the wake-ups it
	// missed.
	wakeBuffer = 64
)

// Wake writes one wake object, wake/<group>/<index>/<rev>-<nonce>, whose
// body holds note: a new key per wake-up, so that wake-ups a poll finds
// together are all delivered, in revision order.
func (s *Store) Wake(ctx context.Context, shard storage.ShardID, note string) error {
	const op = "wake"
	if err := validateShard(shard); err != nil {
		return s.opError(op, wakeShardPrefix(shard), err)
	}
	st, err := s.serverTime(ctx)
	if err != nil {
		return s.opError(op, wakeShardPrefix(shard), err)
	}
	key := wakeKey(shard, s.nextRev(st, 0), rand.Uint32())
	body, err := json.Marshal(wakeRecord{Note: note})
	if err != nil {
		return s.opError(op, key, err)
	}
	if _, err := s.put(ctx, op, key, body); err != nil {
		return err
	}
	s.wakes.kickAfterWrite()
	return nil
}

// wakePoller lists wake/ for every shard watched through one store: one
// LIST per poll however many shards are watched, and a GET only for wake
// objects a watcher has not seen.
type wakePoller struct {
	s    *Store
	kick chan struct{}

	mu      sync.Mutex
	running bool
	subs    map[*wakeSub]struct{}
}

type wakeSub struct {
	shard  storage.ShardID
	prefix string
	out    chan storage.WakeEvent
	known  map[string]bool // keys listed before the watch or delivered
	resync bool            // a Resync is owed (a failed poll, a full channel)
	last   int64           // the last revision delivered
}

func newWakePoller(s *Store) *wakePoller {
	return &wakePoller{s: s, kick: make(chan struct{}, 1), subs: map[*wakeSub]struct{}{}}
}

func (p *wakePoller) kickAfterWrite() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// WatchWakes streams the wake-ups of shard. Before it returns it lists the
// shard's wake objects, so that every Wake completed afterwards is seen
// by a later poll; a failed poll is reported, once one succeeds, as a
// Resync event.
func (s *Store) WatchWakes(ctx context.Context, shard storage.ShardID) (<-chan storage.WakeEvent, error) {
	const op = "watch wakes"
	prefix := wakeShardPrefix(shard)
	if err := validateShard(shard); err != nil {
		return nil, s.opError(op, prefix, err)
	}
	infos, err := s.listAll(ctx, prefix)
	if err != nil {
		return nil, s.opError(op, prefix, err)
	}
	sub := &wakeSub{shard: shard, prefix: prefix, out: make(chan storage.WakeEvent, wakeBuffer), known: map[string]bool{}}
	for _, o := range infos {
		sub.known[o.Key] = true
	}
	p := s.wakes
	p.mu.Lock()
	if s.ctx.Err() != nil {
		p.mu.Unlock()
		close(sub.out)
		return sub.out, nil
	}
	p.subs[sub] = struct{}{}
	if !p.running {
		p.running = true
		s.wg.Add(1)
		go p.run()
	}
	p.mu.Unlock()
	s.wg.Add(1)
	context.AfterFunc(ctx, p.kickAfterWrite) // so that the loop notices
	go func() {
		defer s.wg.Done()
		select {
		case <-ctx.Done():
		case <-s.ctx.Done():
		}
		p.mu.Lock()
		delete(p.subs, sub)
		close(sub.out)
		p.mu.Unlock()
	}()
	return sub.out, nil
}

func (p *wakePoller) run() {
	s := p.s
	defer s.wg.Done()
	interval, idle := s.opts.minPoll, 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		changed := p.poll()
		p.mu.Lock()
		if len(p.subs) == 0 || s.ctx.Err() != nil {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		interval, idle = nextInterval(s.opts, interval, idle, changed)
		timer.Reset(interval)
		select {
		case <-s.ctx.Done():
			p.mu.Lock()
			p.running = false
			p.mu.Unlock()
			return
		case <-p.kick:
			timer.Stop()
			interval, idle = s.opts.minPoll, 0
		case <-timer.C:
		}
	}
}

// poll lists wake/ once and delivers what each watcher has not seen. It
// reports whether anything new was found.
func (p *wakePoller) poll() bool {
	s := p.s
	st, err := s.serverTime(s.ctx)
	var infos []storage.ObjectInfo
	if err == nil {
		infos, err = s.listAll(s.ctx, wakePrefix)
	}
	p.mu.Lock()
	subs := make([]*wakeSub, 0, len(p.subs))
	for sub := range p.subs {
		subs = append(subs, sub)
	}
	if err != nil {
		for _, sub := range subs {
			sub.resync = true
		}
		p.mu.Unlock()
		if s.ctx.Err() == nil {
			s.opts.logger.Warn("s3coord: wake poll failed; watchers will be sent a Resync", "err", err)
		}
		return false
	}
	// Which keys someone has not seen yet.
	want := map[string]bool{}
	for _, sub := range subs {
		for _, o := range infos {
			if strings.HasPrefix(o.Key, sub.prefix) && !sub.known[o.Key] {
				want[o.Key] = true
			}
		}
	}
	p.mu.Unlock()

	keys := make([]string, 0, len(want))
	for _, o := range infos {
		if want[o.Key] {
			keys = append(keys, o.Key)
		}
	}
	notes := make([]string, len(keys))
	ok := make([]bool, len(keys))
	parallel(len(keys), readConcurrency, func(i int) {
		obj, err := s.get(s.ctx, keys[i])
		if err != nil {
			return // gone (collected) or unreadable: the Resync below covers it
		}
		var w wakeRecord
		if json.Unmarshal(obj.Body, &w) == nil {
			notes[i], ok[i] = w.Note, true
		}
	})

	listed := make(map[string]bool, len(infos))
	for _, o := range infos {
		listed[o.Key] = true
	}
	p.mu.Lock()
	for _, sub := range subs {
		if _, still := p.subs[sub]; !still {
			continue
		}
		if sub.resync {
			sub.resync = !sub.offer(storage.WakeEvent{Shard: sub.shard, Revision: sub.last, Resync: true})
		}
		for i, k := range keys {
			if !strings.HasPrefix(k, sub.prefix) || sub.known[k] {
				continue
			}
			sub.known[k] = true
			_, rev, parsed := parseWakeKey(k)
			if !parsed || !ok[i] {
				if !parsed {
					continue // not a wake object of ours
				}
				sub.resync = true
				continue
			}
			ev := storage.WakeEvent{Shard: sub.shard, Note: notes[i], Revision: max(rev, sub.last+1)}
			if !sub.offer(ev) {
				sub.resync = true
			}
		}
		for k := range sub.known {
			if !listed[k] {
				delete(sub.known, k)
			}
		}
	}
	p.mu.Unlock()
	p.collect(st, infos)
	return len(keys) > 0
}

// offer sends ev without blocking (the poller serves every watcher);
// false when the channel is full.
func (sub *wakeSub) offer(ev storage.WakeEvent) bool {
	select {
	case sub.out <- ev:
		if !ev.Resync {
			sub.last = ev.Revision
		}
		return true
	default:
		return false
	}
}

// collect deletes wake objects older than wakeRetention by the store's
// clock (their revision is the writer's reading of it, in microseconds).
func (p *wakePoller) collect(st storage.ServerTime, infos []storage.ObjectInfo) {
	cutoff := st.Earliest().Add(-wakeRetention).UnixMicro()
	n := 0
	for _, o := range infos {
		if n >= wakeGCPerPoll {
			return
		}
		_, rev, ok := parseWakeKey(o.Key)
		if !ok || rev >= cutoff {
			continue
		}
		n++
		cctx, cancel := p.s.withTimeout(p.s.ctx)
		err := p.s.objects.Delete(cctx, o.Key)
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			p.s.opts.logger.Debug("s3coord: collecting an old wake object failed", "key", o.Key, "err", err)
			return
		}
	}
}

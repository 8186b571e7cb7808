package s3coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/storage"
)

// Config returns the dynamic config document; the zero value when absent.
func (s *Store) Config(ctx context.Context) (storage.ConfigValue, error) {
	c, _, err := s.readConfig(ctx)
	if err != nil {
		return storage.ConfigValue{}, err
	}
	if c.Rev == 0 {
		return storage.ConfigValue{}, nil
	}
	return storage.ConfigValue{Value: c.Value, Revision: c.Rev}, nil
}

// readConfig reads the config object: its record and ETag, or a zero record
// when absent.
func (s *Store) readConfig(ctx context.Context) (configRecord, string, error) {
	obj, err := s.get(ctx, configKey)
	if errors.Is(err, storage.ErrNotFound) {
		return configRecord{}, "", nil
	}
	if err != nil {
		return configRecord{}, "", err
	}
	c, err := decodeConfig(obj.Body)
	if err != nil {
		return configRecord{}, "", s.corrupt(configKey, err)
	}
	s.observeRev(c.Rev)
	return c, obj.ETag, nil
}

// PutConfig writes the dynamic config document if its revision is
// prevRevision (0: it must not exist yet) and returns the new revision;
// otherwise storage.ErrPrecondition. The compare is the write's If-Match on
// the ETag of the version whose revision was compared.
func (s *Store) PutConfig(ctx context.Context, value []byte, prevRevision int64) (int64, error) {
	const op = "put config"
	st, err := s.serverTime(ctx)
	if err != nil {
		return 0, s.opError(op, configKey, err)
	}
	var etag string
	if prevRevision != 0 {
		cur, e, err := s.readConfig(ctx)
		if err != nil {
			return 0, err
		}
		if cur.Rev != prevRevision {
			return 0, s.opError(op, configKey, fmt.Errorf("%w: revision is %d, not %d", storage.ErrPrecondition, cur.Rev, prevRevision))
		}
		etag = e
	}
	rec := configRecord{Rev: s.nextRev(st, prevRevision), Value: value}
	body, err := json.Marshal(rec)
	if err != nil {
		return 0, s.opError(op, configKey, err)
	}
	if prevRevision == 0 {
		_, err = s.create(ctx, op, configKey, body)
	} else {
		_, err = s.replace(ctx, op, configKey, body, etag)
	}
	if err != nil {
		return 0, err
	}
	s.config.kickAfterWrite()
	return rec.Rev, nil
}

// configState is what the config poller last read.
type configState struct {
	present bool
	value   storage.ConfigValue
	err     error // undecodable
}

func (c configState) sameAs(o configState) bool {
	return c.present == o.present && c.value.Revision == o.value.Revision && (c.err == nil) == (o.err == nil)
}

func (s *Store) readConfigState(ctx context.Context) (configState, error) {
	c, _, err := s.readConfig(ctx)
	if errors.Is(err, storage.ErrCorrupt) {
		return configState{present: true, err: err}, nil
	}
	if err != nil {
		return configState{}, err
	}
	if c.Rev == 0 {
		return configState{}, nil
	}
	return configState{present: true, value: storage.ConfigValue{Value: c.Value, Revision: c.Rev}}, nil
}

// WatchConfig streams changes to the config key, starting with its current
// value when present. It polls (see doc.go): a change shows within the
// poll interval, and a failed poll is followed, once one succeeds, by the
// current value marked Resync.
func (s *Store) WatchConfig(ctx context.Context) <-chan storage.ConfigEvent {
	out := make(chan storage.ConfigEvent, 4)
	var last configState
	var lastRev int64
	s.config.subscribe(ctx, func() { close(out) }, func(ctx context.Context, u update[configState]) bool {
		if u.interrupted {
			return true // config events carry no interruption; the Resync follows
		}
		cur := u.state
		if !u.first && !u.resync && cur.sameAs(last) {
			return true
		}
		if u.first && !cur.present {
			last = cur
			return true
		}
		ev := storage.ConfigEvent{Kind: storage.EventPut, Value: cur.value, Revision: cur.value.Revision, Resync: u.resync}
		if !cur.present {
			if !last.present {
				last = cur
				return true
			}
			ev = storage.ConfigEvent{Kind: storage.EventDelete, Revision: max(lastRev+1, s.observeRev(0)), Resync: u.resync}
		}
		last = cur
		lastRev = max(lastRev, ev.Revision)
		return send(ctx, out, ev)
	})
	return out
}

package runner

import (
	"context"
	"errors"

	"github.com/tenurehq/tenure/lifecycle"
)

// errStopping is the cause the runner's own tasks are cancelled with.
var errStopping = errors.New("runner: stopping")

// shutdown is the runner's stop order, one list for every way out of Run:
// a graceful stop (ctx ended) drains first; a failed start or a manager
// that ended on its own skips the drain. Each step is a no-op for a part
// Run did not get to start. The order is what keeps the guarantees on the
// way out:
//
//   - draining before the manager stops, so that planned handoffs move the
//     shards in milliseconds instead of leaving them to lease expiry;
//   - the manager (and with it the lease) before the host closes, so that
//     the host's handlers are interrupted by the shards' loss first;
//   - the call server only after the host, so that a caller reaching this
//     runner while its shards move is refused (and re-routes) rather than
//     finding a closed connection, an unknown outcome (calls.go);
//   - clients told the runner stopped (life) before the stores close, so
//     that they report ErrStopped rather than a closed connection.
//
// cs is the runner's messaging (nil if Run did not start it); runErr is
// Run's result, read when the stop reaches the clients.
func (r *Runner) shutdown(work *lifecycle.Stopper, cs *calls, graceful bool, runErr *error) lifecycle.Shutdown {
	mgr, host := r.parts()
	return lifecycle.Shutdown{
		{Name: "stop taking work", Do: func(context.Context) error {
			if graceful {
				r.setDraining()
			}
			return nil
		}},
		{Name: "drain: hand the shards over", Do: func(context.Context) error {
			if !graceful || mgr == nil {
				return nil
			}
			dctx, cancel := context.WithTimeout(context.Background(), r.cfg.DrainTimeout.Std())
			defer cancel()
			if err := mgr.Drain(dctx); err != nil {
				r.log.Warn("drain incomplete; remaining shards free when the lease is revoked", "err", err)
			}
			return nil
		}},
		{Name: "stop the manager: interrupt what is left, revoke the lease", Do: func(context.Context) error {
			work.Cancel(errStopping)
			return work.Stop(context.Background())
		}},
		{Name: "close the entity host", Do: func(context.Context) error {
			if host != nil {
				r.closeHost()
			}
			r.mu.Lock()
			r.registered = false
			r.mu.Unlock()
			return nil
		}},
		{Name: "stop the call server and client", Do: func(context.Context) error {
			cs.close(r.cfg.Sharding.InterruptTimeout.Std())
			return nil
		}},
		{Name: "stop the admin server", Do: func(context.Context) error {
			r.stopAdmin()
			return nil
		}},
		{Name: "tell the clients the runner stopped", Do: func(context.Context) error {
			if graceful {
				r.log.Info("runner stopped")
			}
			r.life.end(*runErr)
			return nil
		}},
		{Name: "close the stores", Do: func(context.Context) error {
			r.closeStores()
			return nil
		}},
	}
}

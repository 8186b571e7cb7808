package s3count

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"time"
)

// errCancelled is the answer to a request whose client gave up while the
// proxy held it back.
var errCancelled = errors.New("s3count: request cancelled during the simulated latency")

// WithLatency makes the proxy simulate a network round trip of rtt plus a
// uniform random jitter in [0, jitter) on every request, drawn once per
// request: half of it is spent before the request is forwarded (the
// request's way to the server), the rest before the answer is passed back
// (the answer's way back). A request therefore costs one round trip
// however many TCP segments its body or its answer take — the delay is
// per request and per answer, not per chunk. What it does not model: the
// round trip of a new connection's handshake (the SDK keeps connections
// alive, so only the first requests of a connection would pay it), a
// link's bandwidth, and loss. Requests on different connections are held
// back concurrently, as on a real link.
func WithLatency(rtt, jitter time.Duration) Option {
	return func(p *Proxy) { p.rtt, p.jitter = max(rtt, 0), max(jitter, 0) }
}

type answerDelayKey struct{}

// holdRequest spends the request's half of its round trip and returns
// the context carrying the answer's half, or an error when the client gave
// up meanwhile.
func (p *Proxy) holdRequest(r *http.Request) (context.Context, error) {
	if p.rtt == 0 && p.jitter == 0 {
		return r.Context(), nil
	}
	total := p.rtt
	if p.jitter > 0 {
		total += rand.N(p.jitter)
	}
	there := total / 2
	if err := wait(r.Context(), there); err != nil {
		return nil, err
	}
	return context.WithValue(r.Context(), answerDelayKey{}, total-there), nil
}

// holdAnswer spends the answer's half of the round trip of the request
// ctx belongs to.
func holdAnswer(ctx context.Context) error {
	d, _ := ctx.Value(answerDelayKey{}).(time.Duration)
	return wait(ctx, d)
}

// wait waits d (simulated latency, not synchronisation) unless ctx ends
// first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errCancelled
	}
}

package bench

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/s3count"
)

// MaxS3Latency bounds a simulated round trip, so that a typo (20s for
// 20ms) cannot stall a run for hours.
const MaxS3Latency = 10 * time.Second

// S3Latency is a simulated network round trip to S3: every request of the
// runners and submitters waits RTT plus a uniform random jitter in
// [0, Jitter), half on the way there and half on the way back (see
// s3count.WithLatency).
type S3Latency struct {
	RTT    time.Duration `json:"rtt_ms"`
	Jitter time.Duration `json:"jitter_ms,omitempty"`
}

// MarshalJSON writes the durations in milliseconds.
func (l S3Latency) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"rtt_ms":%g,"jitter_ms":%g}`, ms(l.RTT), ms(l.Jitter)), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (l *S3Latency) UnmarshalJSON(b []byte) error {
	var v struct {
		RTTMS    float64 `json:"rtt_ms"`
		JitterMS float64 `json:"jitter_ms"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("bench: S3 latency: %w", err)
	}
	l.RTT, l.Jitter = time.Duration(v.RTTMS*float64(time.Millisecond)), time.Duration(v.JitterMS*float64(time.Millisecond))
	return nil
}

// String renders the latency as ParseS3Latency reads it.
func (l S3Latency) String() string {
	if l.Jitter > 0 {
		return fmt.Sprintf("%s,jitter=%s", l.RTT, l.Jitter)
	}
	return l.RTT.String()
}

// ParseS3Latency reads "RTT[,jitter=J]", e.g. "20ms" or "20ms,jitter=10ms".
func ParseS3Latency(s string) (S3Latency, error) {
	bad := func(format string, args ...any) (S3Latency, error) {
		return S3Latency{}, fmt.Errorf("%w: S3 latency %q: %s (want RTT[,jitter=J], e.g. 20ms or 20ms,jitter=10ms)", ErrInvalidOptions, s, fmt.Sprintf(format, args...))
	}
	rtt, rest, hasRest := strings.Cut(strings.TrimSpace(s), ",")
	d, err := time.ParseDuration(strings.TrimSpace(rtt))
	if err != nil {
		return bad("round trip %q is not a duration", rtt)
	}
	l := S3Latency{RTT: d}
	if hasRest {
		k, v, ok := strings.Cut(strings.TrimSpace(rest), "=")
		if !ok || strings.TrimSpace(k) != "jitter" {
			return bad("%q is not jitter=DURATION", rest)
		}
		if l.Jitter, err = time.ParseDuration(strings.TrimSpace(v)); err != nil {
			return bad("jitter %q is not a duration", v)
		}
	}
	if err := l.validate(); err != nil {
		return bad("%v", err)
	}
	return l, nil
}

func (l S3Latency) validate() error {
	switch {
	case l.RTT <= 0:
		return fmt.Errorf("the round trip must be positive")
	case l.Jitter < 0:
		return fmt.Errorf("the jitter must not be negative")
	case l.RTT+l.Jitter > MaxS3Latency:
		return fmt.Errorf("round trip + jitter must be at most %s", MaxS3Latency)
	}
	return nil
}

// s3Endpoint returns the S3 endpoint a cluster's runners and submitters
// use: the server itself, or a proxy in front of it that simulates lat.
func (e *env) s3Endpoint(in Infra, lat *S3Latency) (string, error) {
	if lat == nil {
		return in.S3Endpoint, nil
	}
	p, err := s3count.New(in.S3Endpoint, s3count.WithLatency(lat.RTT, lat.Jitter))
	if err != nil {
		return "", fmt.Errorf("bench: S3 latency proxy: %w", err)
	}
	e.onClose(func() { p.Close() })
	return p.URL(), nil
}

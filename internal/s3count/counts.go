package s3count

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Counts are the requests a Proxy saw, by operation. Every map is non-nil
// in a snapshot; operations never seen are absent.
type Counts struct {
	// Requests counts every request that reached the proxy, retries and
	// requests answered by an injected fault included.
	Requests map[Op]int `json:"requests"`
	// Retries counts the requests the SDK marked as a repeated attempt
	// (amz-sdk-request: attempt=N with N > 1). Go's HTTP transport may
	// also resend an idempotent request (GET, HEAD) whose reused
	// connection was closed; such a resend keeps the attempt number and
	// shows only in Requests.
	Retries map[Op]int `json:"retries,omitempty"`
	// Failed counts the requests answered with a 5xx status or not answered
	// at all (the connection dropped), injected faults included.
	Failed map[Op]int `json:"failed,omitempty"`
	// Injected counts the requests the proxy answered with a fault instead
	// of forwarding them.
	Injected map[Op]int `json:"injected,omitempty"`
	// Status counts the answers by operation and HTTP status; a request
	// that got no answer counts under status 0.
	Status map[Op]map[int]int `json:"status,omitempty"`
	// SentBytes are the bytes of the requests as HTTP/1.1 puts them on the
	// wire: request line, headers (as Go serialises them: close to, not
	// exactly, what the client sent) and body.
	SentBytes map[Op]int `json:"sent_bytes,omitempty"`
	// BodyBytes are the requests' body bytes alone (the part of SentBytes
	// a metadata-only request saves).
	BodyBytes map[Op]int `json:"body_bytes,omitempty"`
	// Connections counts the client connections the proxy accepted: a
	// client that keeps its connections alive opens few; one that keeps
	// fewer idle connections than it has requests in flight opens one for
	// most requests (a TCP and, on a real S3, a TLS handshake each).
	Connections int `json:"connections"`
	// ReceivedBytes are the bytes of the answers the proxy passed back:
	// status line, headers and body.
	ReceivedBytes map[Op]int `json:"received_bytes,omitempty"`
}

func newCounts() Counts {
	return Counts{Requests: map[Op]int{}, Retries: map[Op]int{}, Failed: map[Op]int{}, Injected: map[Op]int{}, Status: map[Op]map[int]int{},
		SentBytes: map[Op]int{}, BodyBytes: map[Op]int{}, ReceivedBytes: map[Op]int{}}
}

func (c Counts) clone() Counts {
	st := make(map[Op]map[int]int, len(c.Status))
	for op, m := range c.Status {
		st[op] = maps.Clone(m)
	}
	return Counts{Requests: maps.Clone(c.Requests), Retries: maps.Clone(c.Retries), Failed: maps.Clone(c.Failed), Injected: maps.Clone(c.Injected), Status: st,
		SentBytes: maps.Clone(c.SentBytes), BodyBytes: maps.Clone(c.BodyBytes), ReceivedBytes: maps.Clone(c.ReceivedBytes), Connections: c.Connections}
}

// Answered returns the number of requests of op answered with status.
func (c Counts) Answered(op Op, status int) int { return c.Status[op][status] }

// combine returns a + sign×b for nested status counts, leaving out zeros.
func combine(a, b map[Op]map[int]int, sign int) map[Op]map[int]int {
	out := map[Op]map[int]int{}
	add := func(m map[Op]map[int]int, k int) {
		for op, byStatus := range m {
			for st, n := range byStatus {
				if out[op] == nil {
					out[op] = map[int]int{}
				}
				out[op][st] += k * n
				if out[op][st] == 0 {
					delete(out[op], st)
				}
			}
			if len(out[op]) == 0 {
				delete(out, op)
			}
		}
	}
	add(a, 1)
	add(b, sign)
	return out
}

// Sub returns c − before, operation by operation, leaving out zeros.
func (c Counts) Sub(before Counts) Counts {
	sub := func(a, b map[Op]int) map[Op]int {
		out := map[Op]int{}
		for op, n := range a {
			if d := n - b[op]; d != 0 {
				out[op] = d
			}
		}
		return out
	}
	return Counts{Requests: sub(c.Requests, before.Requests), Retries: sub(c.Retries, before.Retries),
		Failed: sub(c.Failed, before.Failed), Injected: sub(c.Injected, before.Injected), Status: combine(c.Status, before.Status, -1),
		SentBytes: sub(c.SentBytes, before.SentBytes), BodyBytes: sub(c.BodyBytes, before.BodyBytes), ReceivedBytes: sub(c.ReceivedBytes, before.ReceivedBytes),
		Connections: c.Connections - before.Connections}
}

// Add returns c + other, operation by operation.
func (c Counts) Add(other Counts) Counts {
	add := func(a, b map[Op]int) map[Op]int {
		out := maps.Clone(a)
		if out == nil {
			out = map[Op]int{}
		}
		for op, n := range b {
			out[op] += n
		}
		return out
	}
	return Counts{Requests: add(c.Requests, other.Requests), Retries: add(c.Retries, other.Retries),
		Failed: add(c.Failed, other.Failed), Injected: add(c.Injected, other.Injected), Status: combine(c.Status, other.Status, 1),
		SentBytes: add(c.SentBytes, other.SentBytes), BodyBytes: add(c.BodyBytes, other.BodyBytes), ReceivedBytes: add(c.ReceivedBytes, other.ReceivedBytes),
		Connections: c.Connections + other.Connections}
}

// Total returns the number of requests.
func (c Counts) Total() int {
	n := 0
	for _, v := range c.Requests {
		n += v
	}
	return n
}

// ByClass sums the requests by price class (ClassPut, ClassGet,
// ClassDelete).
func (c Counts) ByClass() map[string]int {
	out := map[string]int{}
	for op, n := range c.Requests {
		out[op.Class()] += n
	}
	return out
}

// String renders the requests by operation, sorted, with retries,
// failures, injected faults and answers other than 2xx when there were
// any: "create=2 get=1 (retries: create=1) (answers: create 503=1)".
func (c Counts) String() string {
	var b strings.Builder
	b.WriteString(describe(c.Requests))
	for _, part := range []struct {
		name string
		m    map[Op]int
	}{{"retries", c.Retries}, {"failed", c.Failed}, {"injected", c.Injected}} {
		if len(part.m) > 0 {
			fmt.Fprintf(&b, " (%s: %s)", part.name, describe(part.m))
		}
	}
	var odd []string
	for _, op := range slices.Sorted(maps.Keys(c.Status)) {
		for _, st := range slices.Sorted(maps.Keys(c.Status[op])) {
			if st < 200 || st > 299 {
				odd = append(odd, fmt.Sprintf("%s %d=%d", op, st, c.Status[op][st]))
			}
		}
	}
	if len(odd) > 0 {
		fmt.Fprintf(&b, " (answers: %s)", strings.Join(odd, " "))
	}
	return b.String()
}

func describe(m map[Op]int) string {
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", op, m[op]))
	}
	return strings.Join(parts, " ")
}

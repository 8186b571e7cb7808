// Package servertime estimates a remote server's clock from the HTTP Date
// headers of its responses.
//
// A Date header has one-second resolution, and the instant the server read
// its clock is somewhere between sending the request and receiving the
// response. One sample therefore bounds the server's clock to an interval
// about a second wide. The Estimator keeps the offset between the server's
// clock and the local monotonic clock as an interval and intersects the
// intervals of successive samples: samples that straddle a second boundary at
// different phases narrow it to about one round trip. Between samples the
// interval widens by a drift allowance, and a sample that contradicts it (the
// server's clock was stepped) restarts the estimate from that sample.
//
// Offsets are measured on the local monotonic clock (time.Time.Sub of values
// carrying a monotonic reading), so steps of the local wall clock do not
// disturb the estimate: the server's clock, not the local one, is the
// authority for task timing.
package servertime

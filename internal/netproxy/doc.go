// Package netproxy is a loopback TCP proxy in front of one target, for
// injecting network faults between a client and a server: a partition
// (Blackhole: connections stay open, nothing is forwarded), a dead host
// (Reset: connections are closed and new ones refused) and a slow link
// (SetDelay). Switching the mode affects existing and new connections.
//
// It has no testing dependency, so that both tests (through
// internal/testenv) and `tenure bench` can cut a runner off from etcd.
package netproxy

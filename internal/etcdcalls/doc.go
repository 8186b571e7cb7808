// Package etcdcalls counts the requests an embedded etcd server served, by
// gRPC method, from the server's own Prometheus counters: what etcd saw,
// not what a client believes it sent. Tests (through internal/testenv) and
// the bench (the idle cluster's etcd load) read it.
package etcdcalls

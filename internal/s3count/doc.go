// Package s3count is a counting HTTP reverse proxy for an S3 endpoint: put
// it between an S3 client and the server (point the client's endpoint at
// Proxy.URL) and it counts every request that reaches the wire, classified
// by S3 operation from its method, path and query — SDK retries included,
// which a count kept by the client library itself (one per API call)
// cannot show. A test or benchmark reads the counts as a user's bill would
// show them.
//
// Classification assumes path-style addressing (<endpoint>/<bucket>/<key>),
// which Tenure uses for S3-compatible servers. The proxy can also inject a
// fault into chosen requests — a 503 answer or a reset connection (neither
// forwarded), or a forwarded request whose answer is dropped — so that a
// test can make the SDK retry and see the retry counted, or make an
// outcome unknown to the client.
//
// It also counts the bytes of requests and answers by operation, the peak
// number of requests in flight, and can simulate a network round trip per
// request (WithLatency), for `tenure bench --s3-latency`.
//
// It has no testing dependency, so that both tests and `tenure bench` can
// use it.
package s3count

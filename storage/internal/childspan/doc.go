// Package childspan keeps the instrumentation of background storage calls
// from flooding a trace backend: a tracer provider whose spans exist only
// as children of a span already in the context.
//
// A runner calls etcd and S3 all the time on its own: lease keep-alives,
// watches, reconciliation LISTs, clock reads. Each would be a root span of
// its own, every tick, on every runner. The same calls made on behalf of a
// traced operation (a task's claim, its commit, a submit) are worth
// seeing. Wrapping the instrumentation's provider with TracerProvider keeps
// the second kind and drops the first, whatever the sampler.
package childspan

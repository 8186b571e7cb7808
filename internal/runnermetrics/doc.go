// Package runnermetrics gathers the metric families a running runner
// exports, for the tests that hold documents and dashboards to the code
// (internal/docs, examples/grafana): the names come from a real runner's
// registry, not from reading the sources.
package runnermetrics

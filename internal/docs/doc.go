// Package docs checks the repository's documentation against the code.
//
// It has no code of its own. Its tests read docs/*.md and README.md and
// fail when the documents drift from the code:
//
//   - a metric name (tenure_…) that the code does not register;
//   - a dotted config key (`detachment.mode`) or a TENURE_* environment
//     variable that the runner's configuration does not know;
//   - a relative Markdown link that does not resolve to a file or
//     directory inside the repository, a heading anchor that does not
//     exist, or a link that leaves the repository (an absolute path, a URL).
//
// Metric names are gathered from the real registrations, not from the
// sources: the entity host, the sharding manager and the S3 request
// observer register their collectors on a recording Registerer when they
// are constructed, which needs no server; the runner registers its own
// series (tenure_runner_*) only inside Run, after connecting, so one runner
// is run against the shared embedded etcd and S3 of internal/testenv and
// its registry gathered. Config keys come from runner.Keys, the list
// `tenure run --help` prints.
package docs

// Package console is the JSON API of Tenure's web console: the endpoints
// under /ui/api/ that every runner serves on its admin address, and that
// the console's pages (package console/ui) read, so that a script sees
// what a person sees. docs/console.md describes each endpoint and field.
//
// The API runs on one runner and shows the whole cluster: what etcd says
// (runners, shard locks, the cluster meta, the dynamic config), what each
// runner says of itself (its /debug/status and /debug/timeline, asked
// concurrently, each request bounded), and what S3 holds (tasks, entity
// state, schedules). It takes all of it through the small interfaces of
// Deps, which the runner implements; it does not import package runner
// (runner imports it).
//
// Access: the session endpoint is open; the shape views (cluster, shards,
// timeline, schedules, config read) are open unless Deps.ProtectReads;
// user data (entity state, tasks, a shard's resident entity ids) and every
// action need the admin credential (Deps.Auth), and are refused with 403
// where none is configured.
//
// The package also holds what a runner records for the timeline view:
// Timeline, a bounded ring of its recent events, pure, which the runner
// fills and serves at GET /debug/timeline (TimelineHandler).
package console

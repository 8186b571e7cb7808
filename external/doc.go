// Package external holds the task handlers that run a task outside the
// process: an HTTP endpoint (http:URL) or a command (exec:COMMAND). They are
// what `tenure run --handler TYPE=SPEC` (and the `handlers` config key)
// registers next to the built-in echo and sleep of package runner.
//
// They live apart from runner because they are the standalone runner's
// concern, not the library's: an embedding service registers its own
// handlers in Go and need not import this package, nor its platform code.
// An embedding service may still use it, with RegisterHandlers or
// NewHandler, to serve a type by an existing HTTP service or script.
//
// Singletons are run outside the same two ways (RegisterSingletons,
// NewSingleton; `tenure run --singleton TYPE=SPEC`): an http: singleton is
// a request held open to an endpoint for as long as the singleton runs on
// this runner, so the endpoint sees it stop as the connection's close; an
// exec: singleton is a command that runs until it exits or is stopped as
// an interrupted exec: task is.
//
// # Platforms
//
// The exec: handler runs its command through a shell in a process group of
// its own on Unix, so that an interrupted task can stop the command and
// whatever it started (SIGTERM, then SIGKILL after ExecKillGrace). Other
// platforms have no process groups to signal: on Windows the command runs
// through cmd.exe and an interruption kills the command's own process at
// once (Windows has no SIGTERM to ask first); processes it started are not
// killed, and the handler stops waiting for their output ExecKillGrace plus
// a second after the command exits.
package external

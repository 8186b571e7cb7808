// Package messaging is the transport of entity messaging: it carries
// volatile calls and sends addressed to an entity (type, id) to the runner
// that holds the entity's shard, and brings the reply back.
//
// It owns the wire (EntityService, gRPC; proto/tenure/call/v1/call.proto,
// generated into messaging/internal/callpb), the Server a runner serves on
// its call address, the Client that routes on a routing.Table and implements
// entity.Caller, the HTTP + JSON entry point for non-Go callers
// (HTTPHandler), TLS loading, and the call metrics and spans. Executing a
// message — the ownership gate, the mailbox, the handler — is the host's
// (entity.Host.Deliver, behind the Deliverer interface).
//
// # Placement by type
//
// A call names no shard group: the Client asks its table which group's
// runners host the entity type (routing.Table.PlaceType, from the types
// each runner lists in its record) and computes the shard in that group;
// when several groups host it, Config.Group if it is one, else the
// lexically first. When the records do not say (a runner older than
// placement by type lists no types), the call goes to Config.Group, as
// before. When every runner lists its types and none lists the call's
// type, the call fails at once, not sent, with ErrTypeNotHosted
// (CODE_TYPE_NOT_HOSTED). The receiving runner computes the shard from the
// group the request names, and refuses a call for a shard it does not
// hold, whichever group the caller chose.
//
// # Failover semantics
//
// Each attempt is delivered at most once: a runner that receives a request
// either runs it or refuses it, and a Client sends a request again only
// when it can prove the previous attempt did not start. Its outcomes:
//
//   - A reply: the handler ran and answered. For a send, the owner accepted
//     the message (the handler runs after the reply).
//   - A refusal (*entity.RefusedError from the owner: not owner, not
//     attached, shard moving): the handler did not run. The Client routes
//     again — at once to the holder the refusal names when that holder's
//     epoch is newer than the one it routed on, else to the table's holder
//     once the table names one under another epoch, waiting at most a
//     jittered exponential backoff (Config.MinBackoff..MaxBackoff). While
//     the holder keeps refusing, this goes on until the call's deadline; the
//     error then matches entity.ErrRefused and context.DeadlineExceeded.
//   - Not sent: the request never left this process (no connection could
//     be made, the connection was refused or closing before grpc queued the
//     request on it, see sentTracker; or it was queued on a socket that had
//     stopped writing before the call began because the owner had closed
//     it, see trackedConn). Retried as a refusal is. A crashed
//     owner refuses connections until its lease expires and the shard
//     moves, so such a call waits for the new holder, woken by the table,
//     rather than spinning. At the deadline the error matches ErrNoOwner.
//   - No owner: no lock is held on the shard. The Client waits on the
//     table (routing.Table.AwaitOwner) until one is, or the deadline.
//   - A failure (*CallError): the owner decided, and says whether the
//     handler ran (CallError.Applied): not started (unknown type, unknown
//     operation, bad input, the caller's deadline before the handler's turn, the entity
//     not activated), ran and answered (an application error, an
//     *entity.AppError the caller gets back with errors.As; a reply too
//     large), or may have run (a handler error or panic, the handler
//     interrupted by the caller's deadline or by its runner's detachment,
//     lost shard or shutdown). Only an entity not activated is tried
//     again; the rest are returned.
//   - Unknown (ErrOutcomeUnknown): the request may have reached the owner
//     and no answer came (the connection broke after sending, or the
//     deadline passed while waiting). Never retried, since the handler may
//     have run: a caller that needs delivery whatever happens uses a task,
//     which is durable and retried by the runtime (package entity/task).
//
// Every error is therefore one of not applied, outcome unknown or an
// application error: AppliedOf says which, and Retryable whether the call
// may be sent again as it is (the loop above asks it too). A context error
// matches only when the caller's own deadline or cancellation ended the
// call: a runner's interruption never reads as the caller's deadline.
//
// A call with no deadline gets Config.DefaultTimeout. The deadline and
// cancellation travel to the handler (gRPC carries both). A request over
// Config.MaxMessageBytes is refused before sending (ErrTooLarge).
//
// A call to an entity whose shard the Client's own runner holds (WithLocal)
// goes to the local Deliverer directly, with the same outcomes and errors.
package messaging

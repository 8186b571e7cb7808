// Package messaging is the transport of entity messaging: it carries
// volatile calls and sends addressed to an entity (type, id) to the runner
// that holds the entity's shard, and brings the reply back.
//
// It owns the wire (EntityService, gRPC streams; proto/tenure/call/v1/call.proto,
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
//   - Not sent: the request never left this process, or the owner read it
//     and said it did not start it. On a stream (see The wire): the request
//     was still in the stream's queue, not yet handed to grpc, when the
//     stream or its connection failed or the caller's deadline passed; or
//     the stream could not be opened; or its frame was handed to grpc on a
//     socket that had stopped writing (the owner had closed it, see
//     trackedConn) at or before the frame began, so no byte of it was
//     written; or the owner does not serve streams (UNIMPLEMENTED: it read
//     none); or the owner read it while stopping and answered not run. On
//     a unary Call: no connection could be made, the connection was
//     refused or closing before grpc queued the request on it (see
//     sentTracker), or it was queued on a socket that had stopped writing
//     before the call began. Retried as a refusal is. A crashed
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
//     and no answer came (the stream or connection broke after its frame
//     was handed to grpc, or the deadline passed while waiting: the owner
//     is then told to cancel it). Never retried, since the handler may
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
// cancellation travel to the handler: on a stream, the time left as a
// duration (the owner's clock starts it, so no clock skew moves it) and a
// cancellation frame; on a unary Call, gRPC's own. A request over
// Config.MaxMessageBytes is refused before sending (ErrTooLarge).
//
// # The wire
//
// Calls to a runner go on a few long-lived bidirectional streams
// (EntityService.Stream) of the pooled connection to its call address:
// min(4, GOMAXPROCS/4), at least one, picked in turn. Callers queue their
// requests, each numbered on its stream; one writer goroutine per stream
// sends everything queued in one frame per write (the calls that arrive
// while a frame is being sent make the next one; before taking the queue
// the writer yields the processor once, so that callers already runnable
// join the frame: batching without a timer), cut so that a frame stays
// within one message's wire limit; a
// reader goroutine hands each reply to its caller by number. The Server
// runs each request of a frame in a goroutine of its own, as it runs a
// unary Call, and batches its replies the same way. A stream that ends
// fails its unanswered calls by the rules above (queued: not sent; sent:
// unknown unless the socket proves it unwritten), and the next call opens
// a new one.
//
// A runner that does not serve Stream (an older one) answers UNIMPLEMENTED
// without reading any request: those calls are not sent, and the Client
// makes its calls to that connection as unary Calls (EntityService.Call,
// which every Server still serves) for as long as the connection lives.
//
// Server.Stop drains streams: it marks each draining, answers every
// request it reads from then on "not run" (not sent, to its caller, which
// routes it again), answers the requests it had started, and ends the
// stream once the caller has closed its side, so that a long-lived stream
// does not hold the graceful stop until its bound. The caller stops
// queueing on a draining stream; its next calls open a new stream, or find
// the runner gone (not sent).
//
// A call to an entity whose shard the Client's own runner holds (WithLocal)
// goes to the local Deliverer directly, with the same outcomes and errors.
package messaging

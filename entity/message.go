package entity

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/tenurehq/tenure/storage"
)

// Entity messaging: volatile calls (request → reply) and sends
// (fire-and-forget) addressed to an entity (type, id). They run on the
// entity's mailbox, one turn at a time with its tasks, on the runner that
// holds the entity's shard, and only while that runner is attached. They
// are not stored: a call runs at most once per attempt, and durable
// delivery is the task path. The transport (package messaging) routes them;
// this file is the contract between it and the host.

// Message is one call or send as the entity's handler sees it.
type Message struct {
	Type string // the entity type
	ID   string // the entity id
	// Op names the operation of the type to run (see Define); empty runs
	// its default operation, or Receive/Handle on a type without
	// operations.
	Op string
	// Body is the caller's request: JSON for the JSON helpers and the HTTP
	// path, any bytes otherwise.
	Body []byte
	// OneWay is set for a send: the caller does not wait for the reply,
	// which is discarded (an error is logged).
	OneWay bool
}

// Receiver is implemented by entities that take calls themselves. A call
// to an entity that does not implement it reaches its Handle (or the type's
// HandlerFunc) as a task built from the message (see CallFrom), so every
// registered type answers calls with the handler that runs its tasks.
type Receiver interface {
	Receive(ctx context.Context, m *Message) ([]byte, error)
}

// Delivery is one message as a transport hands it to the host that should
// own the entity's shard (Host.Deliver).
type Delivery struct {
	Message
	// Shard is the entity's shard, computed by the transport from the
	// cluster's shard count and (group, type, id): never taken from the
	// wire, since the host gates on it.
	Shard storage.ShardID
	// Epoch is the shard lock epoch the caller routed on
	// (routing.Owner.Epoch); 0 accepts whichever epoch the host holds.
	Epoch int64
}

// RefusalReason says why a host did not start a delivery.
type RefusalReason string

const (
	// RefusedNotOwner: this runner does not hold the shard's lock, or holds
	// it under another epoch than the caller routed on.
	RefusedNotOwner RefusalReason = "not-owner"
	// RefusedNotAttached: this runner holds the lock but its detachment
	// decision is detached: it runs nothing until it reattaches.
	RefusedNotAttached RefusalReason = "not-attached"
	// RefusedShardMoving: the shard is being handed over (a planned
	// release); its successor takes the call once it holds the lock.
	RefusedShardMoving RefusalReason = "shard-moving"
)

// ErrRefused is matched (errors.Is) by every *RefusedError.
var ErrRefused = errors.New("entity: message refused")

// RefusedError reports that a host refused a delivery: the handler did not
// run, so the caller may route the message again.
type RefusedError struct {
	Reason RefusalReason
	Shard  storage.ShardID
	// Epoch is the epoch this runner holds the shard's lock under, 0 if it
	// holds none.
	Epoch int64
}

// Error names the shard and the reason.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("entity: message for shard %s refused: %s (held epoch %d)", e.Shard, e.Reason, e.Epoch)
}

// Is matches ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Caller sends calls and sends to entities by (type, id), wherever they
// live. The runner's client implements it, and a handler finds its runner's
// with CallerFrom.
type Caller interface {
	// Call delivers body to the entity and returns its reply. ctx's
	// deadline and cancellation travel to the handler.
	Call(ctx context.Context, typ, id string, body []byte) ([]byte, error)
	// Send delivers body to the entity without waiting for the handler: it
	// returns once the owner has accepted the message.
	Send(ctx context.Context, typ, id string, body []byte) error
	// Invoke delivers m, a call of m.Op (or a send if m.OneWay), and
	// returns its reply (nil for a send). Call and Send are Invoke of the
	// default operation.
	Invoke(ctx context.Context, m *Message) ([]byte, error)
}

// ErrNoCaller is returned by the Caller of CallerFrom on a context that
// carries none (a handler of a host made without WithCaller).
var ErrNoCaller = errors.New("entity: no caller in this context")

type callerKey struct{}

// WithCaller sets the Caller that the host's handlers reach through
// CallerFrom (default: one that returns ErrNoCaller).
func WithCaller(c Caller) Option { return func(o *hostOptions) { o.caller = c } }

// WithCallerOf makes the host's Caller once the host exists, from the host
// itself: the runner's messaging client delivers calls to the entities the
// runner holds straight to the host, so it needs the host, which needs it.
// NewHost calls f before it returns (and fails with f's error); f must not
// use the host but to keep it. It replaces WithCaller.
func WithCallerOf(f func(*Host) (Caller, error)) Option {
	return func(o *hostOptions) { o.callerOf = f }
}

// ContextWithCaller returns ctx carrying c, for CallerFrom.
func ContextWithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the Caller a handler's context carries: its runner's,
// for entity-to-entity messages. It never returns nil.
func CallerFrom(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok && c != nil {
		return c
	}
	return noCaller{}
}

type noCaller struct{}

func (noCaller) Call(context.Context, string, string, []byte) ([]byte, error) {
	return nil, ErrNoCaller
}
func (noCaller) Send(context.Context, string, string, []byte) error { return ErrNoCaller }
func (noCaller) Invoke(context.Context, *Message) ([]byte, error)   { return nil, ErrNoCaller }

// CallJSON calls the entity (typ, id) through c with in encoded as JSON and
// decodes its reply into an Out (an empty reply is Out's zero value).
func CallJSON[Out any](ctx context.Context, c Caller, typ, id string, in any) (Out, error) {
	var out Out
	body, err := json.Marshal(in)
	if err != nil {
		return out, fmt.Errorf("entity: call %s/%s: input does not encode as JSON: %w", typ, id, err)
	}
	reply, err := c.Call(ctx, typ, id, body)
	if err != nil {
		return out, err
	}
	if len(reply) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(reply, &out); err != nil {
		return out, fmt.Errorf("entity: call %s/%s: reply does not decode into %T: %w", typ, id, out, err)
	}
	return out, nil
}

// SendJSON sends in, encoded as JSON, to the entity (typ, id) through c.
func SendJSON(ctx context.Context, c Caller, typ, id string, in any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("entity: send %s/%s: input does not encode as JSON: %w", typ, id, err)
	}
	return c.Send(ctx, typ, id, body)
}

// callTaskID returns the id of the task a message is handed to a Handle
// as: "call-" and 32 random hex digits. Not a task.NewID: a call's task is
// never stored, so it needs no time order, and UUIDv7's ordering takes a
// process-wide lock, which every local call on every core then queued on.
// The 128 bits come from the runtime's per-thread ChaCha8 generator
// (math/rand/v2's top-level functions), unique for any practical purpose.
func callTaskID() string {
	var b [5 + 32]byte
	copy(b[:], "call-")
	var r [16]byte
	binary.LittleEndian.PutUint64(r[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(r[8:], rand.Uint64())
	hex.Encode(b[5:], r[:])
	return string(b[:])
}

package entity

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tenurehq/tenure/entity/task"
)

// Operation is a typed reference to an operation of an entity type, for
// its callers: it encodes an In, decodes an Out, and names the operation
// on the wire, so that a caller needs neither bytes nor envelopes.
//
//	var addItem = entity.Operation[Item, Summary]{Type: "cart", Name: "Add"}
//	sum, err := addItem.Call(ctx, client, "alice", Item{SKU: "sku-1"})
//
// Errors are the Caller's (for the runner's client, see package messaging:
// whether the operation was applied is part of the error).
type Operation[In, Out any] struct {
	Type string // the entity type
	Name string // the operation; "" is the type's default
}

// Call runs the operation on the entity id and returns its output.
func (o Operation[In, Out]) Call(ctx context.Context, c Caller, id string, in In) (Out, error) {
	return Call[Out](ctx, c, o.Type, id, o.Name, in)
}

// Send delivers the operation to the entity id without waiting for it: it
// returns once the entity's owner has accepted it.
func (o Operation[In, Out]) Send(ctx context.Context, c Caller, id string, in In) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("entity: send %s/%s %s: input does not encode as JSON: %w", o.Type, id, o.Name, err)
	}
	_, err = c.Invoke(ctx, &Message{Type: o.Type, ID: id, Op: o.Name, Body: body, OneWay: true})
	return err
}

// Task returns a request for a durable task that runs the operation on
// the entity id (for task.Client.Submit; set its other fields as needed).
func (o Operation[In, Out]) Task(id string, in In) (task.SubmitRequest, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return task.SubmitRequest{}, fmt.Errorf("entity: task %s/%s %s: input does not encode as JSON: %w", o.Type, id, o.Name, err)
	}
	return task.SubmitRequest{Type: o.Type, Entity: id, Op: o.Name, Input: body}, nil
}

// Call runs the operation op of the entity (typ, id) through c with in
// encoded as JSON, and decodes its output into an Out (an empty output is
// Out's zero value).
func Call[Out any](ctx context.Context, c Caller, typ, id, op string, in any) (Out, error) {
	var out Out
	body, err := json.Marshal(in)
	if err != nil {
		return out, fmt.Errorf("entity: call %s/%s %s: input does not encode as JSON: %w", typ, id, op, err)
	}
	reply, err := c.Invoke(ctx, &Message{Type: typ, ID: id, Op: op, Body: body})
	if err != nil {
		return out, err
	}
	if len(reply) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(reply, &out); err != nil {
		return out, fmt.Errorf("entity: call %s/%s %s: output does not decode into %T: %w", typ, id, op, out, err)
	}
	return out, nil
}

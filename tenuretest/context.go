package tenuretest

import (
	"context"
	"time"

	"github.com/tenurehq/tenure/entity"
)

// chainKey is the context key of the entities whose operations wait on
// the current one: the call chain, to tell a call cycle (ErrCallCycle)
// from a call.
type chainKey struct{}

func chainFrom(ctx context.Context) []entKey {
	if ctx == nil {
		return nil
	}
	c, _ := ctx.Value(chainKey{}).([]entKey)
	return c
}

// opContext is the entity.Context of an operation run by a Unit.
type opContext struct {
	context.Context
	u        *Unit
	key      entKey
	op       string
	reminder string
	caller   *unitCaller
}

var _ entity.Context = (*opContext)(nil)

func (c *opContext) Type() string          { return c.key.typ }
func (c *opContext) ID() string            { return c.key.id }
func (c *opContext) Op() string            { return c.op }
func (c *opContext) Now() time.Time        { return c.u.Now() }
func (c *opContext) Caller() entity.Caller { return c.caller }
func (c *opContext) Reminder() string      { return c.reminder }
func (c *opContext) CancelReminder(name string) error {
	return c.u.cancelReminder(c.key, name)
}

func (c *opContext) RemindAfter(name string, d time.Duration, op string, input any) error {
	return c.u.remindAfter(c.key, name, d, op, input)
}

// unitCaller is the Caller of an operation: the Unit, knowing the call
// chain whatever context the operation passes it.
type unitCaller struct {
	u     *Unit
	chain []entKey
}

var _ entity.Caller = (*unitCaller)(nil)

func (c *unitCaller) Call(ctx context.Context, typ, id string, body []byte) ([]byte, error) {
	return c.u.invoke(ctx, c.chain, &entity.Message{Type: typ, ID: id, Body: body})
}

func (c *unitCaller) Send(ctx context.Context, typ, id string, body []byte) error {
	_, err := c.u.invoke(ctx, c.chain, &entity.Message{Type: typ, ID: id, Body: body, OneWay: true})
	return err
}

func (c *unitCaller) Invoke(ctx context.Context, m *entity.Message) ([]byte, error) {
	return c.u.invoke(ctx, c.chain, m)
}

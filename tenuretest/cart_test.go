package tenuretest_test

import (
	"context"
	"sync"
	"time"

	"github.com/tenurehq/tenure/entity"
)

// The types the tests define, as a user's package would: a cart whose
// idle carts are abandoned by a reminder, and a ledger the cart calls.

type Item struct {
	SKU   string `json:"sku"`
	Price int    `json:"price"`
}

type Summary struct {
	Items int `json:"items"`
	Total int `json:"total"`
}

// hooks records what a runner did to a cart's instances: the test's view
// of activations and passivations (the unexported field is no state).
type hooks struct {
	mu     sync.Mutex
	starts int
	stops  []entity.StopReason
}

func (h *hooks) started() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.starts
}

func (h *hooks) stopped() []entity.StopReason {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]entity.StopReason(nil), h.stops...)
}

type Cart struct {
	Items       []Item    `json:"items"`
	CheckedOut  bool      `json:"checked_out"`
	AbandonedAt time.Time `json:"abandoned_at,omitzero"`
	hooks       *hooks
}

const abandonAfter = 30 * time.Minute

// Add adds an item and re-arms the abandon reminder. A price that is not
// positive fails it after the item was appended: the append must not stay.
func (c *Cart) Add(ctx entity.Context, it Item) (Summary, error) {
	if c.CheckedOut {
		return Summary{}, entity.NewAppError(entity.CodeConflict, "checked out")
	}
	c.Items = append(c.Items, it)
	if it.Price <= 0 {
		return Summary{}, entity.NewAppError(entity.CodeInvalid, "price must be positive")
	}
	if err := ctx.RemindAfter("abandon", abandonAfter, "Abandon", nil); err != nil {
		return Summary{}, err
	}
	return c.summary(), nil
}

func (c *Cart) List(entity.Context) ([]Item, error) { return c.Items, nil }

// Checkout records the total in the ledger (a call) and cancels the
// abandon reminder.
func (c *Cart) Checkout(ctx entity.Context) (Summary, error) {
	s := c.summary()
	if _, err := entity.Call[int](ctx, ctx.Caller(), "ledger", "shop", "Record", s.Total); err != nil {
		return Summary{}, err
	}
	c.CheckedOut = true
	return s, ctx.CancelReminder("abandon")
}

// Abandon empties the cart; only its reminder runs it. It tells the
// ledger with a send, through the caller its context carries.
func (c *Cart) Abandon(ctx entity.Context) error {
	if ctx.Reminder() != "abandon" {
		return entity.NewAppError(entity.CodeInvalid, "Abandon runs from its reminder only")
	}
	c.Items = nil
	c.AbandonedAt = ctx.Now()
	return entity.CallerFrom(ctx).Send(ctx, "ledger", "shop", nil)
}

// Audit calls the ledger, which calls this cart back: a cycle.
func (c *Cart) Audit(ctx entity.Context) error {
	_, err := entity.Call[int](ctx, ctx.Caller(), "ledger", "shop", "Inspect", ctx.ID())
	return err
}

// Boom changes the state and panics.
func (c *Cart) Boom(entity.Context) error {
	c.Items = append(c.Items, Item{SKU: "boom"})
	panic("boom")
}

func (c *Cart) summary() Summary {
	s := Summary{Items: len(c.Items)}
	for _, it := range c.Items {
		s.Total += it.Price
	}
	return s
}

func (c *Cart) OnStart(context.Context) error {
	c.hooks.mu.Lock()
	defer c.hooks.mu.Unlock()
	c.hooks.starts++
	return nil
}

func (c *Cart) OnStop(_ context.Context, r entity.StopReason) {
	c.hooks.mu.Lock()
	defer c.hooks.mu.Unlock()
	c.hooks.stops = append(c.hooks.stops, r)
}

func defineCart(h *hooks) *entity.Definition {
	return entity.Define("cart", func(string) *Cart { return &Cart{hooks: h} }, entity.ReadOnly("List"), entity.Default("List"))
}

type Ledger struct {
	Total     int `json:"total"`
	Entries   int `json:"entries"`
	Abandoned int `json:"abandoned"`
}

func (l *Ledger) Record(_ entity.Context, amount int) (int, error) {
	l.Total += amount
	l.Entries++
	return l.Total, nil
}

// Lost counts an abandoned cart (the default operation: a plain send).
func (l *Ledger) Lost(entity.Context) error {
	l.Abandoned++
	return nil
}

func (l *Ledger) Inspect(ctx entity.Context, cart string) (int, error) {
	items, err := entity.Call[[]Item](ctx, ctx.Caller(), "cart", cart, "List", nil)
	return len(items), err
}

var ledgerType = entity.Define[Ledger]("ledger", nil, entity.Default("Lost"))

package main

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/entity"
)

// AbandonAfter is how long a cart with items may stay idle before it is
// emptied.
const AbandonAfter = 30 * time.Minute

// Item is a line of a cart.
type Item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Summary is what the cart's operations answer.
type Summary struct {
	Items     []Item    `json:"items"`
	Count     int       `json:"count"`
	Status    string    `json:"status"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Cart is a shopping cart entity. Its exported fields are its durable
// state: loaded when the cart is activated, saved after every operation
// that changes them.
type Cart struct {
	Items     []Item    `json:"items"`
	Status    string    `json:"status"` // "open", "checked_out" or "abandoned"
	UpdatedAt time.Time `json:"updated_at"`
}

// Add puts qty of an item in the cart and (re)arms its abandon reminder.
func (c *Cart) Add(ctx entity.Context, it Item) (Summary, error) {
	if c.Status == "checked_out" {
		return Summary{}, entity.NewAppError(entity.CodeConflict, "cart is checked out")
	}
	if it.SKU == "" || it.Qty < 1 || it.Qty > 1000 {
		return Summary{}, entity.NewAppError(entity.CodeInvalid, fmt.Sprintf("item %q × %d: want a sku and a qty in [1, 1000]", it.SKU, it.Qty))
	}
	c.merge(it)
	c.Status, c.UpdatedAt = "open", ctx.Now()
	if err := ctx.RemindAfter("abandon", AbandonAfter, "Abandon", nil); err != nil {
		return Summary{}, err
	}
	return c.summary(), nil
}

// Remove takes an item out of the cart.
func (c *Cart) Remove(ctx entity.Context, sku string) (Summary, error) {
	if c.Status == "checked_out" {
		return Summary{}, entity.NewAppError(entity.CodeConflict, "cart is checked out")
	}
	for i, it := range c.Items {
		if it.SKU == sku {
			c.Items = append(c.Items[:i], c.Items[i+1:]...)
			c.UpdatedAt = ctx.Now()
			return c.summary(), nil
		}
	}
	return Summary{}, entity.NewAppError(entity.CodeNotFound, fmt.Sprintf("no item %q in the cart", sku))
}

// Get answers the cart as it is; it changes nothing (read-only).
func (c *Cart) Get(entity.Context) (Summary, error) { return c.summary(), nil }

// Checkout closes the cart and cancels its abandon reminder.
func (c *Cart) Checkout(ctx entity.Context) (Summary, error) {
	if len(c.Items) == 0 {
		return Summary{}, entity.NewAppError(entity.CodeConflict, "cart is empty")
	}
	c.Status, c.UpdatedAt = "checked_out", ctx.Now()
	if err := ctx.CancelReminder("abandon"); err != nil {
		return Summary{}, err
	}
	return c.summary(), nil
}

// Abandon empties an open cart; its reminder runs it after AbandonAfter
// without an Add.
func (c *Cart) Abandon(ctx entity.Context) error {
	if c.Status != "open" {
		return nil
	}
	c.Items, c.Status, c.UpdatedAt = nil, "abandoned", ctx.Now()
	return nil
}

func (c *Cart) merge(it Item) {
	for i := range c.Items {
		if c.Items[i].SKU == it.SKU {
			c.Items[i].Qty += it.Qty
			return
		}
	}
	c.Items = append(c.Items, it)
}

func (c *Cart) summary() Summary {
	n := 0
	for _, it := range c.Items {
		n += it.Qty
	}
	status := c.Status
	if status == "" {
		status = "open"
	}
	return Summary{Items: c.Items, Count: n, Status: status, UpdatedAt: c.UpdatedAt}
}

// Carts is the cart entity type.
var Carts = entity.Define[Cart]("cart", nil, entity.ReadOnly("Get"), entity.Default("Get"))

// The cart's operations, typed, for callers.
var (
	addItem    = entity.Operation[Item, Summary]{Type: "cart", Name: "Add"}
	removeItem = entity.Operation[string, Summary]{Type: "cart", Name: "Remove"}
	getCart    = entity.Operation[struct{}, Summary]{Type: "cart", Name: "Get"}
	checkout   = entity.Operation[struct{}, Summary]{Type: "cart", Name: "Checkout"}
)

package tenuretest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/tenuretest"
)

// Counter is a defined type: its exported field is its durable state.
type Counter struct {
	N int `json:"n"`
}

// Inc adds by to the counter and asks for a reset an hour later.
func (c *Counter) Inc(ctx entity.Context, by int) (int, error) {
	c.N += by
	return c.N, ctx.RemindAfter("reset", time.Hour, "Reset", nil)
}

// Reset sets the counter back to zero.
func (c *Counter) Reset(entity.Context) error {
	c.N = 0
	return nil
}

// Get reads the counter.
func (c *Counter) Get(entity.Context) (int, error) { return c.N, nil }

var counterType = entity.Define[Counter]("counter", nil, entity.ReadOnly("Get"))

// A unit test of a defined type: operations, saved state, passivation and
// a reminder, on a fake clock.
func ExampleUnit() {
	t := &testing.T{} // in a test: the test's own t
	u := tenuretest.New(t, counterType)

	n, _ := tenuretest.Call[int](u, "counter", "c1", "Inc", 2)
	n, _ = tenuretest.Call[int](u, "counter", "c1", "Inc", 3)
	fmt.Println("after two Incs:", n, "saves:", u.Saves("counter", "c1"))

	u.Passivate("counter", "c1") // what survives is what was saved
	n, _ = tenuretest.Call[int](u, "counter", "c1", "Get", nil)
	fmt.Println("after passivation:", n, tenuretest.State[Counter](u, "counter", "c1").N)

	_ = u.Advance(59 * time.Minute)
	fmt.Println("after 59m:", tenuretest.State[Counter](u, "counter", "c1").N)
	_ = u.Advance(time.Minute)
	fmt.Println("after 60m:", tenuretest.State[Counter](u, "counter", "c1").N)
	// Output:
	// after two Incs: 5 saves: 2
	// after passivation: 5 5
	// after 59m: 5
	// after 60m: 0
}

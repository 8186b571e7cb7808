package detachment_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/detachment"
)

func Example() {
	m, err := detachment.New(detachment.DefaultConfig(10*time.Second), 10*time.Second)
	if err != nil {
		panic(err)
	}
	defer m.Close()
	cancel := m.Subscribe(func(tr detachment.Transition) {
		// In a runner: metrics and logs. Never call m's inputs from here.
		fmt.Println(tr.Kind, tr.Reason, "generation", tr.Generation)
	})
	defer cancel()

	// The keep-alive loop reports each attempt; the send time is read
	// before the request leaves.
	sent := time.Now()
	m.KeepAliveOK(42, sent, 10*time.Second)
	ctx, gen, attached := m.Attachment() // entities derive their contexts from ctx
	fmt.Println("attached:", attached, "generation", gen)

	m.LeaseLost(42)
	var de *detachment.DetachedError
	fmt.Println("entities stopped:", ctx.Err() != nil, errors.As(context.Cause(ctx), &de), de.Reason)
	// Output:
	// attached starting generation 1
	// attached: true generation 1
	// detached lease-lost generation 1
	// entities stopped: true true lease-lost
}

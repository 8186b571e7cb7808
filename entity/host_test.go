package entity

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"

	"github.com/tenurehq/tenure/entity/task"
)

// TestSmoke: one runner runs an entity's tasks and an entity-less one.
func TestSmoke(t *testing.T) {
	testenv.CheckLeaks(t)
	e := newEnv(t, 4)
	e.start("solo", e.standard)
	e.waitOwned(10 * time.Second)
	var refs []string
	for i := 0; i < 5; i++ {
		refs = append(refs, e.submit(task.SubmitRequest{Type: "counter", Entity: "c1"}).Ref())
	}
	refs = append(refs, e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{MS: 10})}).Ref())
	for i, ref := range refs {
		got := e.final(ref, 20*time.Second)
		if got.Status != task.Completed {
			t.Fatalf("%s: %s (%s)", ref, got.Status, got.Error)
		}
		if i < 5 && string(got.Result) != fmt.Sprintf(`{"runner":"solo","n":%d}`, i+1) {
			t.Fatalf("task %d result %s", i, got.Result)
		}
	}
}

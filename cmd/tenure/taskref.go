package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// findConcurrency bounds the HEAD requests a bare-id lookup has in flight.
const findConcurrency = 16

// bareIDHelp is what the commands' --help say about a bare id.
const bareIDHelp = `A bare task id works too. It is looked up first where a task without
entity would be (one request); an entity's task, whose shard follows from
its type and entity rather than its id, is then searched for in every other
shard: up to one HEAD request per shard of every group (255 with the
default 256 shards and one group), 16 at a time. An id found in several
shards is refused, naming their refs. The full ref costs no search.
`

// errAmbiguousID reports a bare id that names tasks in several shards.
var errAmbiguousID = errors.New("ambiguous task id")

// resolveRef accepts a ref, or a bare id (see bareIDHelp). An id found
// where a task without entity of the default group would be names that
// task; otherwise it must name exactly one task in the other shards.
func resolveRef(ctx context.Context, conn *Conn, arg string) (string, error) {
	if strings.Contains(arg, "/") {
		_, _, err := task.ParseRef(arg)
		return arg, err
	}
	if err := task.ValidateID(arg); err != nil {
		return "", fmt.Errorf("%q is neither a task ref (group/index/id) nor a task id: %w", arg, err)
	}
	ref := task.Ref(task.ShardOf(conn.Group, conn.Meta.Shards, "", "", arg), arg)
	_, err := conn.Tasks.Get(ctx, ref)
	if !errors.Is(err, task.ErrNotFound) {
		// Found, or an error the command meets again and reports.
		return ref, nil
	}
	refs, err := findTask(ctx, conn, arg, ref)
	switch {
	case err != nil:
		return "", fmt.Errorf("looking for task id %s in every shard: %w", arg, err)
	case len(refs) == 0:
		return "", fmt.Errorf("task id %s is in no shard of group(s) %s (%d shards each): %w",
			arg, strings.Join(conn.Meta.Groups, ", "), conn.Meta.Shards, task.ErrNotFound)
	case len(refs) > 1:
		return "", fmt.Errorf("%w: task id %s names %d tasks, %s: give the full ref", errAmbiguousID, arg, len(refs), strings.Join(refs, ", "))
	}
	return refs[0], nil
}

// findTask returns the refs of the tasks of id in every shard of every
// group but skip's, sorted: one HEAD request per shard, findConcurrency at
// a time. The first failure other than "not found" stops the search.
func findTask(ctx context.Context, conn *Conn, id, skip string) ([]string, error) {
	var shards []storage.ShardID
	for _, g := range conn.Meta.Groups {
		for i := range conn.Meta.Shards {
			if sh := (storage.ShardID{Group: g, Index: i}); task.Ref(sh, id) != skip {
				shards = append(shards, sh)
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan storage.ShardID)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		refs     []string
		firstErr error
	)
	wg.Go(func() {
		defer close(next)
		for _, sh := range shards {
			select {
			case next <- sh:
			case <-ctx.Done():
				return
			}
		}
	})
	for range min(findConcurrency, len(shards)) {
		wg.Go(func() {
			for sh := range next {
				_, err := conn.Objects.Head(ctx, task.TaskKey(sh, id))
				mu.Lock()
				switch {
				case err == nil:
					refs = append(refs, task.Ref(sh, id))
				case !errors.Is(err, storage.ErrNotFound) && firstErr == nil:
					firstErr = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	slices.Sort(refs)
	return refs, nil
}

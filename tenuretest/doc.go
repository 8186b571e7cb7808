// Package tenuretest tests entity types made with entity.Define, with
// public packages only, at two levels.
//
// A Unit (New) is a host in memory: no etcd, no S3, a fake clock. It runs
// a type's operations through entity.Instance, the code a runner's host
// runs them with, so the rules are the runner's: operations of one entity
// run one at a time; OnStart runs on activation; the state is saved after
// each writing operation that returned without error and changed it; a
// failing operation leaves the state as last saved; a panic is an
// *entity.PanicError and discards the instance. A test reads what a
// runner would have written (State, SavedState, Saves), moves the clock to
// fire reminders (Advance) and passivates an entity to prove what is
// durable (Passivate). Each test takes milliseconds.
//
//	func TestCart(t *testing.T) {
//		u := tenuretest.New(t, shop.CartType)
//		sum, err := tenuretest.Call[shop.Summary](u, "cart", "alice", "Add", shop.Item{SKU: "sku-1"})
//		...
//		u.Passivate("cart", "alice")
//		if got := tenuretest.State[shop.Cart](u, "cart", "alice"); len(got.Items) != 1 { ... }
//		if err := u.Advance(31 * time.Minute); err != nil { ... } // the abandon reminder fires
//	}
//
// A Unit is an entity.Caller: code written against a Caller
// (entity.Operation's Call, entity.Call) runs against it unchanged, and
// operations reach the other registered types through Context.Caller.
//
// A Cluster (NewCluster) is a cluster in the test process: real runners
// (package runner) on an embedded etcd and an embedded S3 gateway, each
// runner with its own way to etcd that the test can cut (Kill, Partition).
// It proves what a Unit cannot: the shard moves, the wire, the storage.
// A package that starts clusters calls Main from its TestMain, which stops
// the embedded servers when its tests end.
package tenuretest

// Package state stores one entity's durable state as one S3 object and
// fences its writes by shard ownership.
//
// An object lives at Key(shard, type, id) =
// state/<group>/<index>/<type>/<base64url(id)>.json and holds an Envelope:
// the user's state (raw JSON, or null for none), the shard lock epoch of
// the ownership that last wrote it, a revision that grows with every write
// (so that every body, and with it the ETag, differs), and the ids and
// results of the last tasks whose effect the state contains.
//
// The protocol. An owner activating an entity calls Fence with its epoch:
// one GET, plus one conditional write (Create when absent, Replace with
// If-Match when the stored epoch is older) that records the epoch. From
// then on every Save is a Replace with If-Match on the ETag the owner last
// read or wrote. A runner that lost the shard keeps an ETag that the
// successor's fencing write has replaced, so its Save fails with
// ErrPrecondition, and Save reports a *FencedError after re-reading the
// object to tell a newer owner from an operator's Delete. A stored epoch
// newer than the caller's refuses the Fence itself. No write is
// unconditional, so a stale owner can never overwrite its successor.
//
// A write whose outcome is unknown (a timeout, a lost answer, a request
// cancelled after it was sent) may still land later, under the same
// epoch. An owner that may have such a write in flight activates the
// entity with Refence instead: the same GET, then always a conditional
// write, so that the late write either shows in what was read or is
// refused, its If-Match gone.
//
// The package does not import entity: the host (package entity) and the
// operator commands (tenure entity state get|delete) build on it.
package state

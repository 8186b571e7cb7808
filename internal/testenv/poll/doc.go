// Package poll is the one way the tests (and the bench's harness) wait for
// a condition: they check it at an interval until it holds, within a
// deadline, never with a bare sleep. testenv.WaitFor, harness.Await and
// the storage conformance suite's waits are this package's loop.
//
// It imports no "testing": package harness, compiled into the tenure
// binary for `tenure bench`, uses it too. For tests, For takes the part of
// testing.TB it needs.
package poll

// Package storagetest holds the conformance suites every storage adapter
// must pass, in the style of testing/fstest: TestObjectStore for
// storage.ObjectStore implementations and TestRunnerStore for
// storage.RunnerStore implementations. Adapters run them from their own
// tests against real servers.
package storagetest

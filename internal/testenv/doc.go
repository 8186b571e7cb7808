// Package testenv gives tests real dependencies: embedded etcd and an
// embedded VersityGW S3 gateway (from internal/embedded), namespaced per
// test, plus a goroutine-leak check. Every package's tests get their servers
// from here.
//
// Shared servers start once per test binary on first use. A package that
// uses them should call Main from its TestMain so they are stopped and their
// directories removed when the binary exits.
package testenv

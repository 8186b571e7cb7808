// Package embedded runs Tenure's real dependencies inside the current
// process: a single-member etcd server and a VersityGW S3 gateway over a
// POSIX directory. `tenure dev` and the test environment (internal/testenv)
// both start them from here, so tests exercise exactly what developers run.
//
// VersityGW's POSIX backend changes the process working directory to its
// data root and supports one gateway per process; StartS3 resolves every path
// it is given to an absolute one first and refuses a second gateway.
package embedded

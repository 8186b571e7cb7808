// Command tenure runs and operates Tenure clusters: `tenure dev` starts a
// local cluster, `tenure run` a runner process, and the other commands
// inspect and operate a cluster through its etcd and S3. The command tree
// is cobra's (root.go); each command has a file of its own. The release
// build (-tags release) leaves out dev and bench (release.go).
package main

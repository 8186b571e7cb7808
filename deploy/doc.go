// Package deploy holds the Kubernetes deployment kit (kubernetes/), the
// container image recipe's build script, the S3 IAM policy and the etcd
// role script, and the tests that hold them to the code.
package deploy

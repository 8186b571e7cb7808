// Package s3coord is the runner-storage port (storage.RunnerStore) on an
// object store's conditional writes alone, for clusters that have S3 and no
// etcd.
package s3coord

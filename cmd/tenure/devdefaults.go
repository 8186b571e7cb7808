package main

// The dev cluster's defaults are in every build, the release one included
// (which has no `tenure dev`): the other commands look for its config and
// recognise its endpoints, to say when it is not running.

// DevDir is where `tenure dev` keeps its state and config by default, and
// where the other commands look for the config.
const DevDir = ".tenure-dev"

// Dev cluster defaults: fixed loopback ports, so that a restart finds the
// same endpoints, and credentials that are obviously not for production.
const (
	devEtcdClient = "127.0.0.1:23790"
	devEtcdPeer   = "127.0.0.1:23791"
	devS3         = "127.0.0.1:23900"
	devAdminBase  = 23910
	devAccessKey  = "tenure-dev"
	devSecretKey  = "tenure-dev-secret"
	devBucket     = "tenure"
	devCluster    = "dev"
	devShards     = 64
)

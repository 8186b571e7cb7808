#!/bin/sh
# etcd-role.sh CLUSTER [USER]: creates the etcd role tenure-CLUSTER, with
# read and write on the cluster's key prefix /tenure/CLUSTER/ and nothing
# else, and the user USER (default tenure-CLUSTER) holding it.
#
# Runners keep every key under that prefix (meta, config, runners/,
# shards/, wake/); their leases and the Status call on connect need no key
# permission. Run it as etcd's root user, with etcdctl's own settings:
#   ETCDCTL_ENDPOINTS=https://etcd-0.etcd:2379 ETCDCTL_USER=root:... \
#   ETCDCTL_CACERT=ca.pem ETCDCTL_CERT=root.pem ETCDCTL_KEY=root-key.pem \
#   ETCD_USER_PASSWORD=... sh deploy/etcd-role.sh prod
# With ETCD_USER_PASSWORD set the user gets that password (the Secret's
# etcd-password); without it, no password: etcd then authenticates it by
# a client certificate whose common name is USER (--client-cert-auth).
# Authentication itself is turned on with `etcdctl auth enable` once a
# root user exists.
set -eu

cluster=${1:?usage: etcd-role.sh CLUSTER [USER]}
user=${2:-tenure-$cluster}
role=tenure-$cluster
prefix=/tenure/$cluster/
ETCDCTL=${ETCDCTL:-etcdctl}

case $cluster in
*/* | "") echo "etcd-role.sh: cluster name $cluster must not contain /" >&2; exit 2 ;;
esac

"$ETCDCTL" role add "$role"
"$ETCDCTL" role grant-permission --prefix=true "$role" readwrite "$prefix"
if [ -n "${ETCD_USER_PASSWORD:-}" ]; then
	# On stdin, not in the arguments, where ps would show it.
	printf '%s\n' "$ETCD_USER_PASSWORD" | "$ETCDCTL" user add "$user" --interactive=false
else
	"$ETCDCTL" user add "$user" --no-password
fi
"$ETCDCTL" user grant-role "$user" "$role"

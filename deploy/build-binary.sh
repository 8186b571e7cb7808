#!/bin/sh
# build-binary.sh OUT [VERSION]: builds the release binary of tenure into
# OUT, from the repository root. The one place of the release build flags:
# the Dockerfile and `make release` run it, and deploy's TestBinaryStatic
# builds with it.
#
#   -tags release     without `tenure dev` and `tenure bench`, so without
#                     the etcd server and the S3 gateway (VersityGW) they
#                     embed, nor those modules' own dependencies
#   CGO_ENABLED=0     static: no libc, runs on distroless/static
#   -trimpath         no build machine paths in the binary
#   -s -w             no symbol table, no DWARF
#   -X main.version   `tenure version` and the runners' version label
#
# GOOS and GOARCH pass through (cross builds in the Dockerfile).
set -eu
out=${1:?usage: build-binary.sh OUT [VERSION]}
version=${2:-${VERSION:-dev}}
case $out in /*) ;; *) out=$PWD/$out ;; esac
cd "$(dirname "$0")/.."
CGO_ENABLED=0 exec go build -tags release -trimpath -ldflags "-s -w -X main.version=${version}" -o "$out" ./cmd/tenure

# Tenure — make targets. `make test` is the test command CI runs.
GO         ?= go
TEST_FLAGS ?= -race -count=1 -timeout 18m
BENCH      ?= .
BENCH_TIME ?= 1s

# make soak knobs (see RELIABILITY.md)
SOAK_DURATION       ?= 28m
SOAK_RUNNERS        ?= 5
SOAK_FAULT_INTERVAL ?= 1s
SOAK_MIN_FAULTS     ?= 1000
SOAK_SEED           ?=
SOAK_COORDINATION   ?= etcd
SOAK_TIMEOUT        ?= 120m
SOAK_LOG            ?= /tmp/tenure-soak.log

.PHONY: all test lint bench integration soak dev build release tidy generate

all: lint test

## build: compile every package and the tenure binary into bin/ (every
## command, `tenure dev` and `tenure bench` included)
build:
	$(GO) build ./...
	$(GO) build -o bin/tenure ./cmd/tenure

## release: the release binary into RELEASE_OUT, as the image builds it
## (deploy/build-binary.sh: -tags release, static, stripped, stamped with
## VERSION, default dev): without `tenure dev` and `tenure bench`, so
## without the embedded etcd server and S3 gateway
RELEASE_OUT ?= bin/release/tenure
release:
	sh deploy/build-binary.sh $(RELEASE_OUT) "$(VERSION)"

## test: lint, then every test with the race detector, the deployment
## kit's (deploy/, a module of its own for the Kubernetes API types) and the
## console's browser test (e2e/, a module of its own for the browser
## driver; it needs Chromium, which .ci/run installs) included
test: lint
	$(GO) test $(TEST_FLAGS) ./...
	cd deploy && $(GO) test $(TEST_FLAGS) ./...
	cd e2e && $(GO) test $(TEST_FLAGS) ./...

## lint: go vet, gofmt (any unformatted file fails), `go mod tidy -diff`
## (go.mod and go.sum must be what tidy makes of them: no stale or
## mislabelled requirement), and every package
## built for Windows and macOS: platform-specific code (process groups,
## signals) must sit behind build tags, or embedding services there fail.
## Without cgo: a cross build with it needs the target's C toolchain (CI
## sets CGO_ENABLED=1 for -race), and the module uses none. The release
## build of cmd/tenure (-tags release) is vetted and cross-built too
lint:
	$(GO) vet ./...
	$(GO) vet -tags release ./cmd/tenure/
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run make tidy and commit the result"; exit 1; }
	cd deploy && $(GO) vet ./...
	@cd deploy && $(GO) mod tidy -diff || { echo "deploy/go.mod/go.sum are not tidy: run make tidy and commit the result"; exit 1; }
	cd e2e && $(GO) vet ./...
	@cd e2e && $(GO) mod tidy -diff || { echo "e2e/go.mod/go.sum are not tidy: run make tidy and commit the result"; exit 1; }
	CGO_ENABLED=0 GOOS=windows $(GO) build ./...
	CGO_ENABLED=0 GOOS=darwin $(GO) build ./...
	CGO_ENABLED=0 GOOS=windows $(GO) build -tags release ./cmd/tenure/
	CGO_ENABLED=0 GOOS=darwin $(GO) build -tags release ./cmd/tenure/
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))"; \
	if [ -n "$$out" ]; then echo "gofmt -l reports unformatted files:"; echo "$$out"; exit 1; fi

## bench: go benchmarks (storage, assignment, detach/handoff/failover), then
## every `tenure bench` scenario as JSON (see BENCHMARKS.md)
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCH_TIME) -count 5 ./storage/...
	$(GO) test -run '^$$' -bench 'Assign|Reassign' -count 5 ./sharding/placement/
	$(GO) test -run '^$$' -bench 'DetachLatency' -benchtime 20x ./sharding/
	$(GO) test -run '^$$' -bench 'PlannedHandoff' -benchtime 2x ./sharding/
	$(GO) test -run '^$$' -bench 'CrashFailover' -benchtime 5x ./sharding/
	$(GO) run ./cmd/tenure bench all --json

## integration: the long soak (every fault kind, 5 runner processes) with its audit summary
integration:
	bash -o pipefail -c "$(GO) test -race -count=1 -timeout 60m -tags integration -v -run 'TestSoak' ./integration/... | grep -E 'SOAK SUMMARY|fault [0-9]+:|^(--- |ok|FAIL|PASS)|_test.go:'"
	@echo "(the full integration package, process tests included, also runs in make test)"

## soak: the recorded soak (RELIABILITY.md): SOAK_RUNNERS runner processes
## under load, a fault about every SOAK_FAULT_INTERVAL for SOAK_DURATION,
## at least SOAK_MIN_FAULTS of them, then the audit; SOAK_COORDINATION=s3
## runs it on the S3 coordination backend (no etcd; S3 faults in place of
## etcd's); the full log goes to
## SOAK_LOG, the summary and any failure to the terminal
soak:
	TENURE_SOAK_DURATION=$(SOAK_DURATION) TENURE_SOAK_RUNNERS=$(SOAK_RUNNERS) \
	TENURE_SOAK_FAULT_INTERVAL=$(SOAK_FAULT_INTERVAL) TENURE_SOAK_MIN_FAULTS=$(SOAK_MIN_FAULTS) TENURE_SOAK_SEED=$(SOAK_SEED) \
	TENURE_SOAK_COORDINATION=$(SOAK_COORDINATION) \
	bash -o pipefail -c "$(GO) test -race -count=1 -timeout $(SOAK_TIMEOUT) -v -run '^TestSoak$$' ./integration/ 2>&1 | tee $(SOAK_LOG) | grep -E 'SOAK SUMMARY|^(--- |ok|FAIL|PASS)'" \
	|| { echo "soak failed; the full log is $(SOAK_LOG)"; exit 1; }

## dev: a local cluster on embedded etcd and S3
dev:
	$(GO) run ./cmd/tenure dev

## generate: protobuf code (messaging/internal/callpb) from proto/, with Go tools only:
## buf and every protoc plugin run at pinned versions through `go run`, so
## no protoc install and no network beyond the Go module proxy
BUF ?= $(GO) run github.com/bufbuild/buf/cmd/buf@v1.75.0
generate:
	cd proto && $(BUF) generate

tidy:
	$(GO) mod tidy
	cd deploy && $(GO) mod tidy
	cd e2e && $(GO) mod tidy

# Tenure — make targets. `make test` is the test command CI runs.
GO         ?= go
TEST_FLAGS ?= -race -count=1 -timeout 18m
BENCH      ?= .
BENCH_TIME ?= 1s

.PHONY: all test lint bench integration dev build tidy

all: lint test

## build: compile every package and the tenure binary into bin/
build:
	$(GO) build ./...
	$(GO) build -o bin/tenure ./cmd/tenure

## test: lint, then every test with the race detector
test: lint
	$(GO) test $(TEST_FLAGS) ./...

## lint: go vet and gofmt (any unformatted file fails)
lint:
	$(GO) vet ./...
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))"; \
	if [ -n "$$out" ]; then echo "gofmt -l reports unformatted files:"; echo "$$out"; exit 1; fi

## bench: go benchmarks (storage, assignment, detach/handoff/failover), then
## every `tenure bench` scenario as JSON (see BENCHMARKS.md)
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCH_TIME) -count 5 ./storage/...
	$(GO) test -run '^$$' -bench 'Assign|Reassign' -count 5 ./sharding/
	$(GO) test -run '^$$' -bench 'DetachLatency' -benchtime 20x ./sharding/
	$(GO) test -run '^$$' -bench 'PlannedHandoff' -benchtime 2x ./sharding/
	$(GO) test -run '^$$' -bench 'CrashFailover' -benchtime 5x ./sharding/
	$(GO) run ./cmd/tenure bench all --json

## integration: the long soak (every fault kind, 5 runner processes) with its audit summary
integration:
	bash -o pipefail -c "$(GO) test -race -count=1 -timeout 60m -tags integration -v -run 'TestSoak' ./integration/... | grep -E 'SOAK SUMMARY|fault [0-9]+:|^(--- |ok|FAIL|PASS)|_test.go:'"
	@echo "(the full integration package, process tests included, also runs in make test)"

## dev: a local cluster on embedded etcd and S3
dev:
	$(GO) run ./cmd/tenure dev

tidy:
	$(GO) mod tidy

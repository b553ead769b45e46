# fencepub — see README.md. The two commands a new machine needs:
#   make demo   runs the main job end to end on real etcd and MinIO
#   make test   runs every test against real etcd and MinIO
# Both build the pinned servers into ./bin first (make deps). While changing
# code, make test-unit runs every test that needs no server, in seconds.

GO        ?= go
BIN       := $(CURDIR)/bin
TEST_FLAGS ?= -count=1 -timeout 28m
# The modules with Go code to vet and lint: fencepub itself, the harness
# (the chaos soak, the benchmark suite, the demo and the tests that need
# more than fencepub's go.mod: ARCHITECTURE.md, "Modules") and the
# monitoring rules' test. tools/ only pins build tools.
GO_MODULES := . harness deploy/monitoring
# make test runs every package under the race detector except NORACE_PKGS:
# the suite waits on real servers far more than it computes, so -race costs
# it little (docs/development.md), but the lab's model checker is
# single-goroutine CPU work that -race slows eightfold and cannot find
# anything in. Keep -race at least for reader, publisher, gc and authority.
NORACE_PKGS := ./internal/lab
# cmd/fencepub runs its tests one after another (they set the process
# environment), which made it the suite's longest package (13 minutes under
# -race). Its tests run in three processes at once: CLI_SHARD_1, CLI_SHARD_2
# and the rest, each about a third of the package's time (go test -json
# timings: the leader-stall test alone is a quarter). A new test lands in
# the rest, so none is left out.
CLI_SHARD_1 := ^(TestRunSurvivesLeaderStall|TestJSONLogs|TestRunMetrics)$$
CLI_SHARD_2 := ^(TestSetupRoles|TestResolveCLI|TestBucketPolicies|TestEtcdTLSAndAuth)$$
RACE_PKGS    = $(filter-out $(shell $(GO) list $(NORACE_PKGS) ./cmd/fencepub),$(shell $(GO) list ./...))
# TEST_PARALLEL: how many of the suite's go test processes (SUITE) run at
# once; each runs up to GOMAXPROCS packages. Two on a 2-core machine: the
# lease tests (3 s TTLs through an 8 s leader stall) need their keep-alives
# scheduled on time, and four processes starved one once.
TEST_PARALLEL ?= 2
SUITE := suite-cli-1 suite-cli-2 suite-cli-rest suite-harness suite-partitions suite-race suite-seaweedfs suite-norace
# fuzz: every Fuzz target of FUZZ_PKGS runs for FUZZTIME (one at a time, as
# go test requires); the seed corpus is in each package's testdata/fuzz, where
# go test also writes any failing input it finds. FUZZTIME counts inputs
# (Nx), not seconds: a time budget can end a loaded run with a spurious
# "context deadline exceeded" failure while a worker is mid-input.
# STORE_PKGS: the suites that exercise the object store, which make test runs
# a second time with SeaweedFS as the shared store (FENCEPUB_TEST_STORE;
# docs/object-stores.md); the first pass runs everything on MinIO.
STORE_PKGS := ./internal/objstore/s3store ./publisher ./reader ./gc ./internal/lab/replay
FUZZ_PKGS ?= ./internal/layout ./internal/cli/config ./publisher
FUZZTIME  ?= 200000x
# The unit tier points the dev stack at a directory with no server in it, so
# a test that would start one fails instead of running.
NO_SERVERS := $(BIN)/no-servers-in-the-unit-tier

.PHONY: all deps build test test-unit test-servers $(SUITE) release-check examples-module monitoring cross fuzz wrk rclone systemd-analyze iptables partitions \
	lint fmt vet staticcheck demo bench chaos clean goreleaser release-snapshot

all: build

## deps: build pinned etcd, etcdctl, etcdutl, MinIO and SeaweedFS (weed) into ./bin (idempotent)
deps:
	@./tools/build-servers.sh

## build: build the fencepub CLI, the fencepub-bench suite (harness module)
## and the example programs into ./bin
build:
	$(GO) build -buildvcs=auto -o $(BIN)/fencepub ./cmd/fencepub
	$(GO) -C harness build -o $(BIN)/fencepub-bench github.com/fencepub/fencepub/harness/cmd/fencepub-bench
	$(GO) build -o $(BIN)/batch-publisher ./examples/batch-publisher
	$(GO) build -o $(BIN)/reader-service ./examples/reader-service

## demo: the main job end to end on real etcd and MinIO (harness/demo)
demo: deps build
	$(GO) -C harness run github.com/fencepub/fencepub/harness/cmd/demo --bin $(BIN)

## wrk: install wrk (Debian package), which drives the reader-service
## benchmark rows, with apt-get (as root, else through sudo) unless it is in PATH.
wrk:
	@command -v wrk >/dev/null 2>&1 || { echo "installing wrk"; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get install -y wrk || { $$sudo apt-get update && $$sudo apt-get install -y wrk; }; }

## rclone: install rclone (Debian package), which the dataset benchmark
## rows compare publish --dir with, with apt-get (as root, else through
## sudo) unless it is in PATH.
rclone:
	@command -v rclone >/dev/null 2>&1 || { echo "installing rclone"; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get install -y --no-install-recommends rclone || { $$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends rclone; }; }

## systemd-analyze: install systemd-analyze (Debian package systemd), which
## the checks of deploy/systemd need (verify, security --offline), with apt-get
## (as root, else through sudo) unless it is in PATH.
systemd-analyze:
	@command -v systemd-analyze >/dev/null 2>&1 || { echo "installing systemd (for systemd-analyze)"; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get install -y --no-install-recommends systemd || { $$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends systemd; }; }

## iptables: install iptables (Debian package), which the partition suite
## (harness/partition, docs/partitions.md) cuts links with, with apt-get (as
## root, else through sudo) unless it is in PATH.
iptables:
	@command -v iptables >/dev/null 2>&1 || { echo "installing iptables"; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get install -y --no-install-recommends iptables || { $$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends iptables; }; }

## bench: the benchmark suite (./bin/fencepub-bench) on local etcd and MinIO, plus the Go
## micro-benchmarks; results and chart in bench/results (docs/benchmarks.md).
## wrk (Debian package) drives the reader-service rows and rclone (Debian
## package) is the dataset rows' second baseline; without either, its rows
## are skipped with a note.
bench: deps build
	@$(MAKE) --no-print-directory wrk || echo "bench: wrk not installed; the reader-service rows will be skipped"
	@$(MAKE) --no-print-directory rclone || echo "bench: rclone not installed; the dataset rows against rclone will be skipped"
	$(BIN)/fencepub-bench --local --out bench/results --reader-service $(BIN)/reader-service
	$(GO) test -run '^$$' -bench . -benchmem ./internal/layout > bench/results/micro.txt
	$(GO) test -run '^$$' -bench Classify -benchmem ./gc >> bench/results/micro.txt
	@cat bench/results/micro.txt

## test-unit: every test that needs no server (go test -tags unit: the files
## that start servers are built //go:build !unit), in every module, without
## -race: the layout, the model checker, the in-memory and fault-injecting
## stores, classification, configuration, the CLI's own checks. In addition
## to make test, never instead: the protocol's tests need etcd.
test-unit:
	FENCEPUB_BIN_DIR=$(NO_SERVERS) $(GO) test -tags unit -count=1 ./...
	cd harness && FENCEPUB_BIN_DIR=$(NO_SERVERS) $(GO) test -tags unit -count=1 ./...

## test: the whole suite, as CI runs it: the release and packaging checks
## (release-check), then every test of every module against real servers
## started by internal/testkit/testenv (test-servers), then every fuzz target
## for FUZZTIME (fuzz)
test: deps wrk rclone systemd-analyze iptables
	@$(MAKE) --no-print-directory release-check
	@$(MAKE) --no-print-directory test-servers
	@$(MAKE) --no-print-directory fuzz

## test-servers: every test of fencepub and of the harness module on real
## servers, under the race detector but for NORACE_PKGS, then STORE_PKGS
## again on SeaweedFS: SUITE's go test processes, TEST_PARALLEL at a time
## (wrk installed for the reader-service bench rows and rclone for the
## dataset rows, which must run;
## systemd-analyze for the systemd unit checks; iptables for the partition
## suite, which needs root: FENCEPUB_NETNS=0 deselects it, docs/partitions.md)
test-servers: deps wrk rclone systemd-analyze iptables
	@$(MAKE) --no-print-directory -k -j$(TEST_PARALLEL) -O $(SUITE)

suite-cli-1:
	$(GO) test $(TEST_FLAGS) -race -run '$(CLI_SHARD_1)' ./cmd/fencepub
suite-cli-2:
	$(GO) test $(TEST_FLAGS) -race -run '$(CLI_SHARD_2)' ./cmd/fencepub
suite-cli-rest:
	$(GO) test $(TEST_FLAGS) -race -skip '$(CLI_SHARD_1)|$(CLI_SHARD_2)' ./cmd/fencepub
suite-harness:
	cd harness && $(GO) test $(TEST_FLAGS) -race $$($(GO) list ./... | grep -v '/harness/partition$$')
# The partition suite's smoke subset (docs/partitions.md), without -race:
# its worker processes are this test binary, and it asserts how soon the
# majority side is served.
suite-partitions:
	cd harness && $(GO) test $(TEST_FLAGS) ./partition
suite-race:
	$(GO) test $(TEST_FLAGS) -race $(RACE_PKGS)
suite-seaweedfs:
	FENCEPUB_TEST_STORE=seaweedfs $(GO) test $(TEST_FLAGS) -race $(STORE_PKGS)
suite-norace:
	$(GO) test $(TEST_FLAGS) $(NORACE_PKGS)

## release-check: the release and packaging checks: the release archives
## (goreleaser snapshot, checked by cmd/fencepub's release-tagged test), the
## cross-compile check, the examples in a module of their own, the
## monitoring rules
release-check: goreleaser cross examples-module monitoring
	$(GO) test $(TEST_FLAGS) -tags release -run '^TestReleaseSnapshot$$' ./cmd/fencepub

## monitoring: the Prometheus rules and Grafana dashboard of deploy/monitoring
## parse with Prometheus's own parsers; a module of its own, so that
## github.com/prometheus/prometheus stays out of fencepub's go.mod
monitoring:
	cd deploy/monitoring && $(GO) test $(TEST_FLAGS) ./...

## examples-module: examples/ copied into a throwaway module that requires
## github.com/fencepub/fencepub through a replace to this checkout builds, so
## every example imports public packages only and can be copied as is
examples-module:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	cp -R examples "$$tmp/examples" && cd "$$tmp/examples" && \
	printf 'module example.com/fencepub-examples\n\ngo %s\n\nrequire github.com/fencepub/fencepub v0.0.0\n\nreplace github.com/fencepub/fencepub => %s\n' \
		"$$($(GO) -C $(CURDIR) list -m -f '{{.GoVersion}}')" "$(CURDIR)" > go.mod && \
	GOFLAGS=-mod=mod GOWORK=off $(GO) build ./...

## fuzz: each Fuzz target of FUZZ_PKGS for FUZZTIME (default 200000 inputs)
fuzz:
	@for pkg in $(FUZZ_PKGS); do \
		targets=$$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz') || exit 1; \
		for t in $$targets; do \
			echo "fuzz $$pkg $$t for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

## cross: the library packages build for darwin, windows and freebsd, and
##        the CLI for darwin (cross-compilation only; nothing runs there)
LIBS = $(shell $(GO) list ./... | grep -v -E '/(internal|cmd|examples)(/|$$)')
cross:
	GOOS=darwin GOARCH=arm64 $(GO) build $(LIBS)
	GOOS=windows GOARCH=amd64 $(GO) build $(LIBS)
	GOOS=freebsd GOARCH=amd64 $(GO) build $(LIBS)
	GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./cmd/fencepub

## goreleaser: build the pinned goreleaser (tools/go.mod) into ./bin
##             (idempotent; about 6 minutes the first time)
GORELEASER_VERSION = $(shell cd tools && $(GO) list -m -f '{{.Version}}' github.com/goreleaser/goreleaser/v2)
goreleaser:
	@if [ ! -x $(BIN)/goreleaser ] || [ "$$(cat $(BIN)/.goreleaser.version 2>/dev/null)" != "$(GORELEASER_VERSION)" ]; then \
		echo "goreleaser: building $(GORELEASER_VERSION) into ./bin" >&2; \
		(cd tools && $(GO) build -o $(BIN)/goreleaser github.com/goreleaser/goreleaser/v2) && \
		echo "$(GORELEASER_VERSION)" > $(BIN)/.goreleaser.version; \
	fi

## release-snapshot: every release archive (.goreleaser.yaml) and
##   checksums.txt into ./dist, offline, nothing published. A checkout
##   without a git remote is given the module's URL, without which
##   goreleaser reads no commit. GORELEASER_CONFIG= another config (the
##   release test's, with its own dist).
GORELEASER_CONFIG ?= .goreleaser.yaml
release-snapshot: goreleaser
	@if [ -z "$$(git remote)" ]; then export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url \
		GIT_CONFIG_VALUE_0=https://github.com/fencepub/fencepub.git; fi; \
	$(BIN)/goreleaser release --snapshot --clean --config $(GORELEASER_CONFIG)

## lint: gofmt check, go vet and staticcheck (pinned in tools/go.mod), in
##       every module of GO_MODULES, of the files of every build: the default
##       one with the release-tagged test (-tags release) and the unit tier's
##       (-tags unit)
lint: fmt vet staticcheck

fmt:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	@for m in $(GO_MODULES); do \
		echo "go vet $$m"; \
		(cd $$m && $(GO) vet -tags release ./... && $(GO) vet -tags unit ./...) || exit 1; \
	done

staticcheck:
	@cd tools && $(GO) build -o $(BIN)/staticcheck honnef.co/go/tools/cmd/staticcheck
	@for m in $(GO_MODULES); do \
		echo "staticcheck $$m"; \
		(cd $$m && $(BIN)/staticcheck -tags release ./...) || exit 1; \
	done

## partitions: the full partition suite (harness/partition, about 15
##   minutes, as root): every scenario at full length and a soak that mixes
##   partitions with process faults (docs/partitions.md)
partitions: deps iptables
	cd harness && FENCEPUB_PARTITIONS=full $(GO) test $(TEST_FLAGS) -v ./partition

## chaos: fault-injection soak against real etcd (3 members) and a distributed MinIO (4 nodes),
##        judged by the linearizability and invariant checker (harness/chaos).
##        SEED= replays a schedule (empty: random, printed); DURATION= e.g. 30m;
##        STORE=seaweedfs runs it on etcd and one SeaweedFS (its own faults) instead of MinIO.
SEED     ?=
DURATION ?= 5m
STORE    ?= minio
chaos: deps
	$(GO) -C harness build -o $(BIN)/chaos github.com/fencepub/fencepub/harness/cmd/chaos
	$(BIN)/chaos -store=$(STORE) -seed=$(SEED) -duration=$(DURATION)

clean:
	rm -rf $(BIN)

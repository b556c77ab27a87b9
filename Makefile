# endpoint-aggregator Makefile. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

GO ?= go

# The control-plane binaries the tests and the demo run. They are built from
# source by hack/tools (pinned in hack/tools/go.mod); keep these in step with
# it (internal/testenv checks that).
K8S_VERSION := v1.37.2
ETCD_VERSION := v3.7.0

CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/endpoint-aggregator
ASSETS_DIR = $(abspath $(CACHE_DIR))/bin/k8s-$(K8S_VERSION)-etcd-$(ETCD_VERSION)

BINARY := bin/endpoint-aggregator

# The unit tests run under the race detector (needs cgo and a C compiler);
# `make test-unit UNIT_RACE=` runs them without it.
UNIT_RACE ?= -race
# Extra flags for the unit tests, e.g. `make test-unit UNIT_TEST_FLAGS='-count=1 -run TestMerge'`.
UNIT_TEST_FLAGS ?=
# -race makes the tests several times slower than without it.
UNIT_TIMEOUT ?= 20m
E2E_TIMEOUT ?= 30m
# How many end-to-end tests run at once, each with its own hub and members.
# They mostly wait on their API servers, so three fit on two cores.
E2E_PARALLEL ?= 3

# What `kube-apiserver --version` and `kubectl version` report (as in the
# official builds; without it they say v0.0.0-master).
K8S_MAJOR := $(patsubst v%,%,$(word 1,$(subst ., ,$(K8S_VERSION))))
K8S_MINOR := $(word 2,$(subst ., ,$(K8S_VERSION)))
K8S_LDFLAGS := $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(pkg).gitVersion=$(K8S_VERSION) -X $(pkg).gitMajor=$(K8S_MAJOR) \
	-X $(pkg).gitMinor=$(K8S_MINOR) -X $(pkg).gitTreeState=clean)

TOOLS := $(addprefix $(ASSETS_DIR)/,kube-apiserver kube-controller-manager kubectl etcd)
# What the real-node tests (make test-node) run besides TOOLS; built from the
# same pinned module.
NODE_TOOLS := $(addprefix $(ASSETS_DIR)/,kubelet kube-scheduler kube-proxy)
# The Debian packages a node needs (containerd runs the pods with runc on the
# CNI bridge; kube-proxy programs nftables; nsenter and unshare enter the
# node's namespaces; busybox-static goes into the images the MCS conformance
# suites' pods name). make node-deps installs the missing ones.
NODE_PACKAGES := containerd runc containernetworking-plugins nftables util-linux iproute2 busybox-static
# The ones hack/demo starts (through internal/testenv): one etcd and one
# kube-apiserver per cluster. `make demo` builds only these.
DEMO_TOOLS := $(addprefix $(ASSETS_DIR)/,kube-apiserver etcd)

# CoreDNS for the end-to-end DNS tests, built from hack/coredns (pinned in
# hack/coredns/go.mod; keep in step, internal/testenv checks that).
COREDNS_VERSION := v1.15.0
COREDNS := $(abspath $(CACHE_DIR))/bin/coredns-$(COREDNS_VERSION)/coredns

# Prometheus and promtool for the monitoring tests (dashboard queries and
# alert rules checked against the daemon), built from hack/prometheus (pinned
# in hack/prometheus/go.mod; keep in step, internal/testenv checks that). The
# module's v0.3XX.Y is Prometheus 3.XX.Y.
PROMETHEUS_VERSION := v0.316.0
PROMETHEUS_DIR := $(abspath $(CACHE_DIR))/bin/prometheus-$(PROMETHEUS_VERSION)
PROMETHEUS := $(addprefix $(PROMETHEUS_DIR)/,prometheus promtool)
PROMETHEUS_LDFLAGS := -X github.com/prometheus/common/version.Version=3.$(patsubst 3%,%,$(word 2,$(subst ., ,$(PROMETHEUS_VERSION)))).$(word 3,$(subst ., ,$(PROMETHEUS_VERSION))) \
	-X github.com/prometheus/common/version.Branch=HEAD

# The MCS API conformance suite's test binary, which test/node runs on a
# ClusterSet of real nodes; built from hack/conformance (pinned there).
MCS_CONFORMANCE_VERSION := v0.1.1-0.20241002142749-eff1ba8c3ab2
MCS_CONFORMANCE := $(abspath $(CACHE_DIR))/bin/mcs-conformance-$(MCS_CONFORMANCE_VERSION)/mcs-conformance.test

# Helm, for the chart's tests and `make lint-chart` (see "Helm chart and
# container image" below). Defined here: `tools` depends on it.
HELM_VERSION := v3.22.0
HELM := $(abspath $(CACHE_DIR))/bin/helm-$(HELM_VERSION)/helm

# Envoy Gateway's controller for the Gateway API test (test/e2e), installed
# from its pinned Go module into the cache with the module's CRDs (Gateway
# API's and its own) beside it in crds/. No Envoy is needed: the test reads
# what the controller would program, not traffic.
ENVOY_GATEWAY_VERSION := v1.9.1
ENVOY_GATEWAY_DIR := $(abspath $(CACHE_DIR))/bin/envoy-gateway-$(ENVOY_GATEWAY_VERSION)
ENVOY_GATEWAY := $(ENVOY_GATEWAY_DIR)/envoy-gateway

# golangci-lint for `make lint` (configuration: .golangci.yml), installed
# from its pinned Go module into the cache like Helm.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(abspath $(CACHE_DIR))/bin/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

# Where the builds of the pinned tools and the module downloads write their
# output: the terminal gets one line per build, and a failed one the log's
# tail.
BUILD_LOG = $(abspath $(CACHE_DIR))/build.log

# quietly: $(1) runs with its output appended to BUILD_LOG.
define quietly
mkdir -p $(dir $(BUILD_LOG)); { $(1); } >>$(BUILD_LOG) 2>&1 || { echo "build failed; the last lines of $(BUILD_LOG):" >&2; tail -n 40 $(BUILD_LOG) >&2; exit 1; }
endef

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} \
		/^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-17s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: modules ## Build bin/endpoint-aggregator
	$(GO) build -o $(BINARY) ./cmd/endpoint-aggregator

# The main module's and hack/image's modules, downloaded into the module
# cache with the noise in BUILD_LOG; seconds when they are there.
.PHONY: modules
modules:
	@$(call quietly,$(GO) mod download && $(GO) mod download -C hack/image)

.PHONY: demo
demo: $(DEMO_TOOLS) build ## Run a hub and two member clusters with the daemon aggregating them (Ctrl-C stops); builds only etcd and kube-apiserver
	ENDPOINT_AGGREGATOR_ASSETS=$(ASSETS_DIR) $(GO) run ./hack/demo -binary $(CURDIR)/$(BINARY)

# How many times `make demo-check` runs the demo, and extra flags for each
# run (`go run ./hack/demo -help`), e.g. DEMO_CHECK_FLAGS='-timeout 1m'.
RUNS ?= 10
DEMO_CHECK_FLAGS ?=

.PHONY: demo-check
demo-check: $(DEMO_TOOLS) build ## Run the demo with -check RUNS times in a row; report how many printed the hub tables (logs of failed runs in bin/demo-check/)
	ENDPOINT_AGGREGATOR_ASSETS=$(ASSETS_DIR) GO=$(GO) hack/demo-check.sh -n $(RUNS) -binary $(CURDIR)/$(BINARY) $(DEMO_CHECK_FLAGS)

.PHONY: fmt
fmt: ## Format the Go sources
	gofmt -s -w $$(find . -name '*.go' -not -path './.git/*')

.PHONY: vet
vet: ## Run go vet
	$(GO) vet ./...
	$(GO) vet -C hack/image ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (pinned GOLANGCI_LINT_VERSION, config .golangci.yml) on the main module and hack/image
	$(GOLANGCI_LINT) run ./...
	cd hack/image && $(GOLANGCI_LINT) run ./...

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Build golangci-lint (pinned GOLANGCI_LINT_VERSION) into the cache if missing (Go module proxy only; a few minutes cold)

# go install into a temporary GOBIN, then rename, as for Helm.
$(GOLANGCI_LINT):
	@mkdir -p $(@D)
	@echo "building golangci-lint $(GOLANGCI_LINT_VERSION) into the cache, once (a few minutes cold; output in $(BUILD_LOG))"
	@tmp="$$(mktemp -d '$(@D)/.build.XXXXXX')"; trap 'rm -rf "$$tmp"' EXIT; \
	$(call quietly,GOBIN="$$tmp" $(GO) install -trimpath github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)); \
	mv -f "$$tmp/golangci-lint" $@

.PHONY: clean
clean: ## Remove the repository's build outputs (not the binary cache)
	rm -rf bin/

##@ Testing

.PHONY: test
test: export ENDPOINT_AGGREGATOR_ASSETS = $(ASSETS_DIR)
test: export ENDPOINT_AGGREGATOR_COREDNS = $(COREDNS)
test: export ENDPOINT_AGGREGATOR_HELM = $(HELM)
test: export ENDPOINT_AGGREGATOR_PROMETHEUS = $(PROMETHEUS_DIR)
test: export ENDPOINT_AGGREGATOR_ENVOY_GATEWAY = $(ENVOY_GATEWAY)
test: modules tools $(ENVOY_GATEWAY) ## Run all tests (unit, e2e, real-node) against the real Kubernetes binaries; builds them first if missing
	$(MAKE) --no-print-directory test-unit
	$(MAKE) --no-print-directory test-e2e
	$(MAKE) --no-print-directory test-node

.PHONY: test-unit
test-unit: export ENDPOINT_AGGREGATOR_HELM = $(HELM)
test-unit: export ENDPOINT_AGGREGATOR_PROMETHEUS = $(PROMETHEUS_DIR)
test-unit: ## Run unit tests under -race (tests that need the Kubernetes binaries skip when there are none)
	GO=$(GO) hack/gotest.sh unit $(UNIT_RACE) -timeout $(UNIT_TIMEOUT) $(UNIT_TEST_FLAGS) ./pkg/... ./cmd/... ./internal/... ./config/... ./hack/... ./charts/...
	GO=$(GO) hack/gotest.sh unit-image -C hack/image $(UNIT_RACE) -timeout $(UNIT_TIMEOUT) $(UNIT_TEST_FLAGS) ./...

.PHONY: test-e2e
test-e2e: export ENDPOINT_AGGREGATOR_ASSETS = $(ASSETS_DIR)
test-e2e: export ENDPOINT_AGGREGATOR_COREDNS = $(COREDNS)
test-e2e: export ENDPOINT_AGGREGATOR_HELM = $(HELM)
test-e2e: export ENDPOINT_AGGREGATOR_PROMETHEUS = $(PROMETHEUS_DIR)
test-e2e: export ENDPOINT_AGGREGATOR_ENVOY_GATEWAY = $(ENVOY_GATEWAY)
test-e2e: tools $(ENVOY_GATEWAY) ## Run the end-to-end tests in ./test/e2e against real kube-apiservers
	@pkgs="$$($(GO) list -e ./test/e2e/... 2>/dev/null)"; \
	if [ -z "$$pkgs" ]; then echo "test-e2e: no packages under ./test/e2e"; exit 0; fi; \
	echo "$(GO) test -count=1 -parallel $(E2E_PARALLEL) -timeout $(E2E_TIMEOUT) ./test/e2e/..."; \
	GO=$(GO) hack/gotest.sh e2e -count=1 -parallel $(E2E_PARALLEL) -timeout $(E2E_TIMEOUT) ./test/e2e/...

# The real-node tests (test/node): clusters with a kubelet, containerd and
# kube-proxy each, pods and traffic. They need root (CI has it); without it
# they skip and say so. They build their own releases of the tree (as `make
# release` does, without the CLI archives) and pull them from a registry they
# run, so they need no `make image`.
.PHONY: test-node
test-node: export ENDPOINT_AGGREGATOR_ASSETS = $(ASSETS_DIR)
test-node: export ENDPOINT_AGGREGATOR_COREDNS = $(COREDNS)
test-node: export ENDPOINT_AGGREGATOR_HELM = $(HELM)
test-node: export ENDPOINT_AGGREGATOR_MCS_CONFORMANCE = $(MCS_CONFORMANCE)
test-node: tools $(NODE_TOOLS) $(MCS_CONFORMANCE) node-deps ## Run the real-node tests (test/node): releases pulled from a local registry, the chart's pods and traffic on real kubelets; needs root, skips without
	GO=$(GO) hack/gotest.sh node -count=1 -timeout $(E2E_TIMEOUT) ./test/node/...

# The fault-injection tests are part of test-e2e too; this runs only them.
.PHONY: test-faults
test-faults: export ENDPOINT_AGGREGATOR_ASSETS = $(ASSETS_DIR)
test-faults: $(TOOLS) ## Run only the fault and hostile-input e2e tests (API servers restarted or frozen, watch expiry, rotation, SIGKILL, partition, hostile member)
	$(GO) test -count=1 -v -timeout $(E2E_TIMEOUT) -run '^(TestFault|TestUnreachable|TestHostile)' ./test/e2e/

##@ Benchmarks

# Flags for hack/bench (`go run ./hack/bench -help`), e.g.
# `make bench BENCH_FLAGS='-members 50 -churn 20'`. The defaults are the
# issue's scale: 250 members x 10 services x 100 endpoints (~5 min with
# -runs 1; the default -runs 3 repeats the timed phases, about twice that).
BENCH_FLAGS ?=
# Where the JSON results go, and the Markdown file whose Results section the
# run rewrites; set either empty to skip it.
BENCH_JSON ?= bin/bench.json
BENCH_DOC ?= docs/performance.md

.PHONY: bench
bench: export ENDPOINT_AGGREGATOR_ASSETS = $(ASSETS_DIR)
bench: tools build ## Run the scale benchmark (not a test): the daemon vs a bare-client floor on real API servers; see docs/performance.md
	$(GO) run ./hack/bench -binary $(CURDIR)/$(BINARY) $(if $(BENCH_JSON),-json $(BENCH_JSON)) $(if $(BENCH_DOC),-doc $(BENCH_DOC)) $(BENCH_FLAGS)

# The bench at issue 24's larger scales (`make bench-scale`, not part of
# `make test`): MEMBERSxSERVICESxENDPOINTS each, one run per timed phase and
# short idle and churn phases, each into its own section of BENCH_DOC.
BENCH_SCALES ?= 1000x1x100 1000x1x1000
BENCH_SCALE_FLAGS ?= -runs 1 -changes 50 -churn-duration 10s

.PHONY: bench-scale
bench-scale: export ENDPOINT_AGGREGATOR_ASSETS = $(ASSETS_DIR)
bench-scale: tools build ## Run the benchmark at a thousand members and at a million endpoints (~30 min); see docs/performance.md
	set -e; for scale in $(BENCH_SCALES); do \
		set -- $$(echo $$scale | tr x ' '); \
		$(GO) run ./hack/bench -binary $(CURDIR)/$(BINARY) -members $$1 -services $$2 -endpoints $$3 \
			$(if $(BENCH_DOC),-doc $(BENCH_DOC)) $(BENCH_SCALE_FLAGS) $(BENCH_FLAGS); \
	done

# The soak (`make soak`, not part of `make test`): SOAK_DURATION of churn with
# members flapping unreachable and one daemon restart, sampled every minute,
# at a scale a 2-core machine holds. SOAK_FLAGS adds or overrides flags, e.g.
# `make soak SOAK_DURATION=10m SOAK_FLAGS='-members 50 -soak-flap-every 2m'`.
# The plot and the doc section it rewrites; set either empty to skip it.
SOAK_DURATION ?= 30m
SOAK_FLAGS ?=
SOAK_PLOT ?= docs/soak.svg
SOAK_DOC ?= docs/performance.md

.PHONY: soak
soak: export ENDPOINT_AGGREGATOR_ASSETS = $(ASSETS_DIR)
soak: tools build ## Run the soak (not a test): 30 min of churn, flapping members and a restart; RSS, heap, goroutines and watches must not grow; see docs/performance.md
	$(GO) run ./hack/bench -binary $(CURDIR)/$(BINARY) -members 100 -services 5 -endpoints 20 -churn 20 \
		-soak $(SOAK_DURATION) -soak-plot '$(SOAK_PLOT)' $(if $(SOAK_DOC),-doc $(SOAK_DOC)) $(SOAK_FLAGS)

# The flood (`make bench-flood`, not part of `make test`): one member past
# its read bounds next to honest members; RSS and their changes' latency.
.PHONY: bench-flood
bench-flood: export ENDPOINT_AGGREGATOR_ASSETS = $(ASSETS_DIR)
bench-flood: tools build ## Run the flood (not a test): a member serving 10x the bounds, the daemon's RSS and the other members' latency; see docs/performance.md
	$(GO) run ./hack/bench -binary $(CURDIR)/$(BINARY) -flood -members 50 -services 4 -endpoints 50 -changes 50 $(BENCH_FLAGS)

##@ Kubernetes binaries

.PHONY: tools
tools: $(TOOLS) $(COREDNS) $(HELM) $(PROMETHEUS) ## Build kube-apiserver, kube-controller-manager, kubectl, etcd, CoreDNS, Helm, Prometheus and promtool into the cache (only missing ones; ~20 min cold)

.PHONY: kubectl
kubectl: $(ASSETS_DIR)/kubectl ## Build kubectl into the cache if missing (`make demo` suggests it but does not build it)

.PHONY: coredns
coredns: $(COREDNS) ## Build CoreDNS (kubernetes plugin, for the e2e DNS tests) into the cache if missing

.PHONY: prometheus
prometheus: $(PROMETHEUS) ## Build Prometheus and promtool (for the monitoring tests) into the cache if missing (~7 min cold)

.PHONY: envoy-gateway
envoy-gateway: $(ENVOY_GATEWAY) ## Build Envoy Gateway's controller (for the e2e Gateway API test) and fetch its CRDs into the cache if missing (~6 min cold)

.PHONY: node-tools
node-tools: $(NODE_TOOLS) ## Build kubelet, kube-scheduler and kube-proxy into the cache if missing (~2 min once kube-apiserver is built)

.PHONY: mcs-conformance
mcs-conformance: $(MCS_CONFORMANCE) ## Build the MCS API conformance suite's test binary (pinned in hack/conformance) into the cache if missing (~3 min cold)

$(MCS_CONFORMANCE):
	@mkdir -p $(@D)
	@echo "go test -C hack/conformance -c -o $@ sigs.k8s.io/mcs-api/conformance"
	@$(GO) test -C hack/conformance -c -o $@.tmp sigs.k8s.io/mcs-api/conformance
	@mv -f $@.tmp $@

.PHONY: node-deps
node-deps: ## Install the Debian packages real nodes need (containerd, runc, CNI plugins, nftables) when missing; needs root
	@missing=""; for p in $(NODE_PACKAGES); do dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "node-deps: installed"; exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "node-deps: missing$$missing; run as root to install them (the real-node tests skip without root)"; exit 0; fi; \
	echo "apt-get install$$missing"; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing >/dev/null || \
	{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing >/dev/null; }

.PHONY: print-assets-dir
print-assets-dir: ## Print the directory the Kubernetes binaries are built into
	@echo $(ASSETS_DIR)

# build-tool: $(1) = package, $(2) = ldflags. Writes to a temporary name and
# renames, so an interrupted build never leaves a half-written binary behind.
# The first build compiles Kubernetes (~10-15 min); the Go build cache makes
# later ones take seconds.
define build-tool
	@mkdir -p $(@D)
	@echo "building $(notdir $@) from source into the cache, once (the first Kubernetes build takes ~10 min cold; output in $(BUILD_LOG))"
	@$(call quietly,$(GO) build -C hack/tools -ldflags '$(2)' -o $@.tmp $(1))
	@mv -f $@.tmp $@
endef

$(ASSETS_DIR)/kube-apiserver:
	$(call build-tool,k8s.io/kubernetes/cmd/kube-apiserver,$(K8S_LDFLAGS))

$(ASSETS_DIR)/kube-controller-manager:
	$(call build-tool,k8s.io/kubernetes/cmd/kube-controller-manager,$(K8S_LDFLAGS))

$(ASSETS_DIR)/kubectl:
	$(call build-tool,k8s.io/kubernetes/cmd/kubectl,$(K8S_LDFLAGS))

$(ASSETS_DIR)/etcd:
	$(call build-tool,go.etcd.io/etcd/server/v3,)

$(ASSETS_DIR)/kubelet:
	$(call build-tool,k8s.io/kubernetes/cmd/kubelet,$(K8S_LDFLAGS))

$(ASSETS_DIR)/kube-scheduler:
	$(call build-tool,k8s.io/kubernetes/cmd/kube-scheduler,$(K8S_LDFLAGS))

$(ASSETS_DIR)/kube-proxy:
	$(call build-tool,k8s.io/kubernetes/cmd/kube-proxy,$(K8S_LDFLAGS))

# CoreDNS with only the plugins the DNS tests use (hack/coredns/main.go).
$(COREDNS):
	@mkdir -p $(@D)
	@echo "building CoreDNS $(COREDNS_VERSION) from source into the cache, once (a few minutes cold; output in $(BUILD_LOG))"
	@$(call quietly,$(GO) build -C hack/coredns -o $@.tmp .)
	@mv -f $@.tmp $@

# go install into a temporary GOBIN, then rename, as for Helm; the CRDs are
# the plain YAML of the module's chart (charts/gateway-helm/charts/crds),
# copied first, so a binary in place means its CRDs are too.
$(ENVOY_GATEWAY):
	@mkdir -p $(@D)
	@echo "building Envoy Gateway $(ENVOY_GATEWAY_VERSION) into the cache, once (about 6 minutes cold; output in $(BUILD_LOG))"
	@tmp="$$(mktemp -d '$(@D)/.build.XXXXXX')"; trap 'rm -rf "$$tmp"' EXIT; \
	$(call quietly,GOBIN="$$tmp" $(GO) install -trimpath github.com/envoyproxy/gateway/cmd/envoy-gateway@$(ENVOY_GATEWAY_VERSION)); \
	src="$$($(GO) mod download -json github.com/envoyproxy/gateway@$(ENVOY_GATEWAY_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p')"; \
	test -n "$$src" && rm -rf $(@D)/crds && mkdir -p $(@D)/crds && \
	cp "$$src"/charts/gateway-helm/charts/crds/crds/gatewayapi-crds.yaml "$$src"/charts/gateway-helm/charts/crds/crds/generated/*.yaml $(@D)/crds/ && \
	chmod u+w $(@D)/crds/*.yaml && mv -f "$$tmp/envoy-gateway" $@

# Prometheus without its service-discovery plugins (the tests scrape static
# targets) and without the web UI's assets (they query the HTTP API).
$(PROMETHEUS_DIR)/%:
	@mkdir -p $(@D)
	@echo "building $* $(PROMETHEUS_VERSION) from source into the cache, once (a few minutes cold; output in $(BUILD_LOG))"
	@$(call quietly,$(GO) build -C hack/prometheus -tags remove_all_sd -ldflags '$(PROMETHEUS_LDFLAGS)' -o $@.tmp github.com/prometheus/prometheus/cmd/$*)
	@mv -f $@.tmp $@

##@ Helm chart and container image

CHART_DIR := charts/endpoint-aggregator
# The image `make image` builds into bin/image.tar, named IMAGE_REPO (by
# default the chart's image.repository) : IMAGE_TAG (the chart's image.tag
# defaults to its appVersion). IMAGE_TAG is also what `endpoint-aggregator
# version` prints in the image. Setting IMAGE_REPO (command line or
# environment) also pushes the image there; IMAGE_PUSH= does not.
IMAGE_PUSH := $(if $(filter command line environment,$(origin IMAGE_REPO)),1)
IMAGE_REPO ?= ghcr.io/endpoint-aggregator/endpoint-aggregator
IMAGE_TAG ?= dev
IMAGE ?= $(IMAGE_REPO):$(IMAGE_TAG)
IMAGE_TAR := bin/image.tar
IMAGE_GOARCH ?= $(shell $(GO) env GOARCH)
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
# The daemon as the Dockerfile builds it, plus an empty build ID and no VCS
# stamp so the same sources give the same binary, hence the same digest.
IMAGE_BINARY = bin/image/linux_$(IMAGE_GOARCH)/endpoint-aggregator
IMAGE_LDFLAGS = -s -w -buildid= -X github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app.Version=$(IMAGE_TAG) -X github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app.Commit=$(IMAGE_REVISION)
DOCKER ?= docker

# What `helm version` reports and the Kubernetes version Helm assumes when it
# renders offline (.Capabilities.KubeVersion, lint deprecations), as Helm's
# own Makefile sets them.
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/internal/version.gitTreeState=clean \
	$(foreach pkg,helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil,\
	-X $(pkg).k8sVersionMajor=$(K8S_MAJOR) -X $(pkg).k8sVersionMinor=$(K8S_MINOR))

.PHONY: helm
helm: $(HELM) ## Build Helm (pinned HELM_VERSION) into the cache if missing (Go module proxy only; a few minutes cold)

# go install into a temporary GOBIN, then rename: an interrupted build never
# leaves a half-written binary behind.
$(HELM):
	@mkdir -p $(@D)
	@echo "building Helm $(HELM_VERSION) into the cache, once (a few minutes cold; output in $(BUILD_LOG))"
	@tmp="$$(mktemp -d '$(@D)/.build.XXXXXX')"; trap 'rm -rf "$$tmp"' EXIT; \
	$(call quietly,GOBIN="$$tmp" $(GO) install -trimpath -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)); \
	mv -f "$$tmp/helm" $@

.PHONY: chart-sync
chart-sync: ## Copy the CRDs, hub/member RBAC rules and the dashboard from config/ into the chart (charts/charts_test.go checks they agree)
	@mkdir -p $(CHART_DIR)/crds $(CHART_DIR)/files/rbac
	rm -f $(CHART_DIR)/crds/*.yaml
	cp config/crd/multicluster.x-k8s.io_*.yaml $(CHART_DIR)/crds/
	cp config/rbac/hub-clusterrole.yaml config/rbac/hub-writer-role.yaml config/rbac/hub-events-role.yaml config/rbac/hub-role.yaml config/rbac/hub-clusterprofile-role.yaml config/rbac/member-clusterrole.yaml $(CHART_DIR)/files/rbac/
	@mkdir -p $(CHART_DIR)/files/dashboards
	cp config/dashboards/*.json $(CHART_DIR)/files/dashboards/

.PHONY: lint-chart
lint-chart: $(HELM) ## helm lint --strict the chart (values checked against values.schema.json), with default and all-on values
	$(HELM) lint --strict $(CHART_DIR)
	$(HELM) lint --strict $(CHART_DIR) --set serviceMonitor.enabled=true --set prometheusRule.enabled=true --set dashboards.enabled=true --set createNamespaces=true \
		--set hubIsMember=true --set replicas=1 --set-json 'includeNamespaces=["shop"]' \
		--set metrics.secure=true --set networkPolicy.enabled=true

.PHONY: test-chart
test-chart: export ENDPOINT_AGGREGATOR_ASSETS = $(ASSETS_DIR)
test-chart: export ENDPOINT_AGGREGATOR_HELM = $(HELM)
test-chart: export ENDPOINT_AGGREGATOR_PROMETHEUS = $(PROMETHEUS_DIR)
test-chart: tools ## Run the chart tests: config/ and chart agree, and the daemon works with exactly the chart's RBAC
	$(GO) test -count=1 ./charts/...
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) -run 'TestChart' ./test/e2e/

# hack/image (its own module, pinning go-containerregistry) builds the image
# in Go from the static binary; the Dockerfile describes the same image
# (hack/image/dockerfile_test.go checks).
.PHONY: image
image: ## Build the image IMAGE_REPO:IMAGE_TAG without Docker into bin/image.tar (docker load, ctr images import); pushes when IMAGE_REPO is set
	@mkdir -p $(dir $(IMAGE_BINARY))
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_GOARCH) $(GO) build -trimpath -buildvcs=false \
		-ldflags '$(IMAGE_LDFLAGS)' -o $(IMAGE_BINARY) ./cmd/endpoint-aggregator
	env -u GOOS -u GOARCH $(GO) run -C hack/image . -binary $(CURDIR)/$(IMAGE_BINARY) -arch $(IMAGE_GOARCH) \
		-tag $(IMAGE) -o $(CURDIR)/$(IMAGE_TAR) -version $(IMAGE_TAG) \
		$(if $(IMAGE_REVISION),-revision $(IMAGE_REVISION)) $(if $(IMAGE_PUSH),-push)

.PHONY: image-docker
image-docker: ## Build the same image IMAGE_REPO:IMAGE_TAG from the Dockerfile with docker build (needs a Docker engine with BuildKit)
	$(DOCKER) build --build-arg VERSION=$(IMAGE_TAG) --build-arg REVISION=$(IMAGE_REVISION) -t $(IMAGE) .

##@ Release

# `make release VERSION=vX.Y.Z` writes RELEASE_DIR: the image for
# linux/amd64 and linux/arm64 as an OCI image index (an OCI layout in
# image/ and the same as an OCI archive), the CLI for linux and darwin,
# amd64 and arm64 (.tar.gz), a CycloneDX SBOM of each, the chart packaged
# as version X.Y.Z with appVersion vX.Y.Z, and SHA256SUMS. The same commit
# gives the same files (SOURCE_DATE_EPOCH sets their times). With REGISTRY
# (a registry host and optional path) it pushes the image to
# REGISTRY/endpoint-aggregator:vX.Y.Z, which the packaged chart then
# defaults to, and the chart to oci://REGISTRY/charts. REGISTRY_CA (a PEM
# file) is the CA of the registry's certificate when the system does not
# trust it; the pushes then use TLS even to loopback.
VERSION ?=
REGISTRY ?=
REGISTRY_CA ?=
RELEASE_DIR := bin/release

.PHONY: release
release: $(HELM) ## Build release VERSION=vX.Y.Z into bin/release (multi-arch image, CLI archives, SBOMs, chart, SHA256SUMS); pushes with REGISTRY set
	@if [ -z "$(VERSION)" ]; then echo "release: set VERSION=vX.Y.Z"; exit 1; fi
	env -u GOOS -u GOARCH $(GO) run -C hack/image . release -version $(VERSION) \
		$(if $(IMAGE_REVISION),-revision $(IMAGE_REVISION)) -source $(CURDIR) -o $(CURDIR)/$(RELEASE_DIR) \
		-go $(GO) -helm $(HELM) $(if $(REGISTRY),-registry $(REGISTRY)) $(if $(REGISTRY_CA),-ca-file $(abspath $(REGISTRY_CA)))

# syntax=docker/dockerfile:1
# The endpoint-aggregator image: a static binary on distroless, running as
# the nonroot user (65532), the UID the Helm chart's securityContext expects.
#
#   make image-docker                # docker build -t $(IMAGE) .
#   docker build --build-arg VERSION=v0.1.0 -t REGISTRY/endpoint-aggregator:v0.1.0 .
#
# Needs a Docker engine with BuildKit (the default since Docker 23). `make
# image` builds the same image without Docker (hack/image);
# hack/image/dockerfile_test.go checks that the two agree, so change both.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
# What `endpoint-aggregator version` prints.
ARG VERSION=dev
ARG REVISION=
WORKDIR /src
# Dependencies first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
# The whole main module, minus what .dockerignore leaves out (the binary may
# embed files from anywhere in it).
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath \
      -ldflags "-s -w -X github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app.Version=${VERSION} -X github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app.Commit=${REVISION}" \
      -o /out/endpoint-aggregator ./cmd/endpoint-aggregator

FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
# The git commit, e.g. --build-arg REVISION=$(git rev-parse HEAD).
ARG REVISION=
LABEL org.opencontainers.image.title="endpoint-aggregator" \
      org.opencontainers.image.description="Aggregates Services and EndpointSlices of member Kubernetes clusters into a hub (Multi-Cluster Services API)" \
      org.opencontainers.image.source="https://github.com/endpoint-aggregator/endpoint-aggregator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/endpoint-aggregator /endpoint-aggregator
USER 65532:65532
# /metrics, /healthz and /readyz (--metrics-bind-address).
EXPOSE 8080/tcp
ENTRYPOINT ["/endpoint-aggregator"]
CMD ["run"]

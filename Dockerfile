# syntax=docker/dockerfile:1
# Container image of the fencepub CLI: a static binary (CGO_ENABLED=0) on
# distroless, running as the non-root user. The Kubernetes manifests in
# deploy/kubernetes run it. Not built by this repository's tests (they parse
# it: cmd/fencepub/deploy_test.go).
#   docker build --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) -t fencepub .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The variables --version reads (cmd/fencepub/version.go); empty: "(devel)".
ARG VERSION=""
ARG COMMIT=""
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X main.releaseVersion=${VERSION} -X main.releaseCommit=${COMMIT}" \
    -o /out/fencepub ./cmd/fencepub

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fencepub /fencepub
USER nonroot:nonroot
ENTRYPOINT ["/fencepub"]

# syntax=docker/dockerfile:1
# One image with both Sluice binaries, /usr/local/bin/throttler (HTTP API,
# dispatcher, /metrics) and /usr/local/bin/worker (asynq workers); the
# command picks one (see docker-compose.yml).
FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# VERSION (docker build --build-arg VERSION=...) is stamped into the binaries
# (User-Agent: Sluice/<version>, the startup logs); without it, git describe
# of the build context when it holds a usable .git, else "dev". The stamp
# replaces Go's own VCS stamping, off so a context whose .git is unusable (a
# git worktree's) still builds.
ARG VERSION
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    version="${VERSION:-$(git describe --always --dirty 2>/dev/null || true)}" && \
    go build -trimpath -buildvcs=false \
      -ldflags="-s -w -X github.com/sluicehq/sluice/internal/version.Stamp=${version}" \
      -o /out/ ./cmd/throttler ./cmd/worker

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER nonroot:nonroot
# 8080: the throttler's API and /metrics; 9091: the worker's /metrics.
EXPOSE 8080 9091
CMD ["throttler", "--config", "/etc/sluice/sluice.yaml"]

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
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/throttler ./cmd/worker

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER nonroot:nonroot
# 8080: the throttler's API and /metrics; 9091: the worker's /metrics.
EXPOSE 8080 9091
CMD ["throttler", "--config", "/etc/sluice/sluice.yaml"]

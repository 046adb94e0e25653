# syntax=docker/dockerfile:1
#
# causet: the one binary (bridge, worker, runtime, relay, projections, intents, dlq, produce).
#
#   docker build -t causet .                 # runtime image (bridge, worker, runtime, relay)
#   docker build --target init -t causet-init .   # + psql and the init script
#
# docker-compose.yml builds both targets; see deployments/README.md.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# make release passes the version, commit and date it stamps its binaries
# with; a plain docker build names itself from the releases file.
ARG VERSION="" COMMIT="" DATE=""
ENV RELEASE=github.com/causet/projection-retry/internal/release
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -X ${RELEASE}.Version=${VERSION} -X ${RELEASE}.Commit=${COMMIT} -X ${RELEASE}.Date=${DATE}" -o /causet ./cmd/causet

# Runtime: alpine rather than distroless so healthchecks can use busybox wget
# on /readyz (CAUSET_METRICS_ADDR; the runtime's CAUSET_RUNTIME_ADDR) and the
# init script has a shell. The processes write no files: the root filesystem
# may be read-only (deployments/kubernetes runs it so, as uid 10001).
FROM alpine:3.21 AS runtime
RUN apk add --no-cache ca-certificates tzdata \
    && adduser -D -H -u 10001 causet
COPY --from=build /causet /usr/local/bin/causet
# Example IR documents, their table DDL and the example intent handlers,
# deployed by the compose init service.
COPY examples/projections/*.yaml examples/projections/*.sql /etc/causet/projections/
COPY examples/intents/*.yaml /etc/causet/intents/
# In a container the metrics endpoint and the runtime must listen beyond loopback.
ENV CAUSET_METRICS_ADDR=0.0.0.0:9464 CAUSET_RUNTIME_ADDR=0.0.0.0:8080
EXPOSE 9464 8080
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/causet"]
CMD ["--help"]

# One-shot init: applies the example DDL with psql and deploys the example IR.
FROM runtime AS init
USER root
RUN apk add --no-cache postgresql-client
COPY deployments/init.sh /usr/local/bin/causet-init
RUN chmod 0755 /usr/local/bin/causet-init
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/causet-init"]
CMD []

# Default target (plain `docker build .`): the runtime image.
FROM runtime

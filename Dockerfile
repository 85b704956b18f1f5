# syntax=docker/dockerfile:1
#
# The floodgate image: one static binary on an empty base, run as a user
# without privileges, with nothing to write on the root file system.
#
#   docker build -t floodgate \
#     --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) \
#     --build-arg DATE=$(git log -1 --format=%cI) .
#   docker run --read-only -p 8080:8080 -p 9102:9102 \
#     -v $PWD/examples/school.yaml:/etc/floodgate/floodgate.yaml:ro floodgate
#
# The build context holds no .git (.dockerignore), so the version, commit
# and date come from the build arguments (floodgate version prints them).
# The binary carries the time zone database (time/tzdata), so calendar
# quotas in any zone work without /usr/share/zoneinfo; the CA certificates
# are there for rediss:// stores, JWKS and OTLP over TLS. To keep the
# memory store's state or the keys made through the admin API, mount a
# volume on /var/lib/floodgate and name it in the policy file
# (server.state_file: /var/lib/floodgate/state.bin).
# cmd/floodgate's TestStaticBinaryInAnEmptyRoot runs the binary built so
# in an empty root directory, as this image runs it.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=""
ARG COMMIT=""
ARG DATE=""
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w \
        -X github.com/floodgate/floodgate/internal/buildinfo.version=${VERSION} \
        -X github.com/floodgate/floodgate/internal/buildinfo.commit=${COMMIT} \
        -X github.com/floodgate/floodgate/internal/buildinfo.date=${DATE}" \
      -o /out/usr/local/bin/floodgate ./cmd/floodgate \
 && mkdir -p /out/etc/floodgate /out/var/lib/floodgate \
 && /out/usr/local/bin/floodgate version

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/usr/local/bin/floodgate /usr/local/bin/floodgate
COPY --from=build /out/etc/floodgate /etc/floodgate
COPY --from=build --chown=65532:65532 /out/var/lib/floodgate /var/lib/floodgate
# A numeric user, so that runAsNonRoot can tell it is not root.
USER 65532:65532
# 8080: the gateway; 9102: /healthz, /readyz and /metrics (the ops
# listener); the admin listener stays on loopback unless the policy file
# lists admin tokens and moves it.
EXPOSE 8080 9102
ENTRYPOINT ["/usr/local/bin/floodgate"]
CMD ["serve", "--config", "/etc/floodgate/floodgate.yaml", "--listen", ":8080", "--ops-listen", ":9102", "--log-format", "json"]

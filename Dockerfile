# syntax=docker/dockerfile:1
#
# hitcount image: one static-ish binary on distroless.
#   docker build -t hitcount:dev .
#   docker run --rm -e REDIS_URL=redis://host:6379 -p 9184:9184 hitcount:dev
#
# No HEALTHCHECK: Kubernetes ignores Docker's HEALTHCHECK and uses the
# Deployment's probes (/healthz liveness, /readyz readiness) instead, and the
# distroless base has no shell or curl to run one with.

FROM rust:1-bookworm AS builder
WORKDIR /src

# Cache-friendly: the crates.io registry and the target dir live in BuildKit
# cache mounts, so a source change recompiles only the hitcount crate, not its
# dependencies. The binary is copied out of the cache mount in the same step.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin hitcount \
    && install -D -m 0755 target/release/hitcount /out/hitcount

# glibc + libgcc, no shell, runs as uid/gid 65532 (`nonroot`), the ids the
# Kubernetes manifests pin.
FROM gcr.io/distroless/cc-debian12:nonroot

ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="hitcount" \
      org.opencontainers.image.description="Count hits at scale on Redis" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"

COPY --from=builder /out/hitcount /usr/local/bin/hitcount

USER 65532:65532
EXPOSE 9184
ENTRYPOINT ["/usr/local/bin/hitcount"]
CMD ["worker"]

#!/usr/bin/env bash
# Builds and starts the compose cluster, then waits until every container is healthy:
#   1. cargo build --release (or $KEEL_CARGO_PROFILE) of keel-controller, keel-broker and
#      keelctl (host toolchain);
#   2. deploy/base-image.sh (local Debian bookworm image, made once, no registry);
#   3. docker build of the Keel image ($KEEL_IMAGE, default keel:local);
#   4. docker compose up -d, and a wait of up to $KEEL_UP_TIMEOUT_S (120) seconds for health.
# Environment: CARGO_TARGET_DIR (where cargo puts target/), KEEL_IMAGE, KEEL_BASE_IMAGE (see
# base-image.sh), KEEL_UP_TIMEOUT_S, KEEL_SKIP_BUILD=1 (reuse the binaries already built),
# KEEL_CARGO_PROFILE (release, the default, or dev: the unoptimized binaries `cargo build`
# makes, for checks of the deployment itself such as CI's smoke test), KEEL_TLS=1 (TLS on
# every gRPC connection: certificates from deploy/dev-certs.sh, docker-compose.tls.yml),
# KEEL_AUTHORIZER=1 with KEEL_TLS=1 (the standard authorizer: docker-compose.authz.yml).
# Ends with one `up.sh: timing: ...` line (seconds per step).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT="$PWD"
export KEEL_IMAGE="${KEEL_IMAGE:-keel:local}"
TIMEOUT_S="${KEEL_UP_TIMEOUT_S:-120}"
PROFILE="${KEEL_CARGO_PROFILE:-release}"
case "$PROFILE" in
    release) PROFILE_DIR=release ;;
    dev) PROFILE_DIR=debug ;;
    *) echo "up.sh: KEEL_CARGO_PROFILE must be release or dev, not $PROFILE" >&2; exit 1 ;;
esac
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE_DIR"
STAGE="$ROOT/deploy/.build"

die() { echo "up.sh: $*" >&2; exit 1; }
# shellcheck source=deploy/compose.sh
. "$ROOT/deploy/compose.sh"

t=$SECONDS
if [ "${KEEL_SKIP_BUILD:-0}" != 1 ]; then
    echo "up.sh: building $PROFILE binaries (first build takes several minutes)"
    cargo build --profile "$PROFILE" --bin keel-controller --bin keel-broker --bin keelctl
fi
t_build=$((SECONDS - t))
for bin in keel-controller keel-broker keelctl; do
    [ -x "$TARGET/$bin" ] || die "$TARGET/$bin is missing (build it, or set CARGO_TARGET_DIR)"
done

t=$SECONDS
"$ROOT/deploy/base-image.sh"
t_base=$((SECONDS - t))

t=$SECONDS
rm -rf "$STAGE"
mkdir -p "$STAGE"
cp "$TARGET/keel-controller" "$TARGET/keel-broker" "$TARGET/keelctl" "$STAGE/"
cp "$ROOT/deploy/http-get.sh" "$STAGE/"
echo "up.sh: building image $KEEL_IMAGE"
docker build -q -t "$KEEL_IMAGE" -f "$ROOT/deploy/Dockerfile" \
    --build-arg BASE_IMAGE="${KEEL_BASE_IMAGE:-keel/debian-bookworm-slim:bookworm}" "$STAGE" >/dev/null \
    || die "docker build failed"
t_image=$((SECONDS - t))

t=$SECONDS
if [ "${KEEL_TLS:-0}" = 1 ]; then
    "$ROOT/deploy/dev-certs.sh" "$TARGET/keelctl"
fi
echo "up.sh: starting the cluster"
compose up -d

services=(controller-1 controller-2 controller-3 broker-1 broker-2 broker-3)
deadline=$((SECONDS + TIMEOUT_S))
while :; do
    unhealthy=()
    for s in "${services[@]}"; do
        state="$(docker inspect -f '{{.State.Health.Status}}' "keel-$s" 2>/dev/null || echo missing)"
        [ "$state" = healthy ] || unhealthy+=("$s=$state")
    done
    if [ ${#unhealthy[@]} -eq 0 ]; then
        echo "up.sh: all ${#services[@]} containers healthy"
        break
    fi
    if [ $SECONDS -ge $deadline ]; then
        compose ps >&2 || true
        for s in "${services[@]}"; do
            echo "--- keel-$s (last lines)" >&2
            docker logs --tail 15 "keel-$s" >&2 2>&1 || true
        done
        die "not healthy after ${TIMEOUT_S}s: ${unhealthy[*]}"
    fi
    sleep 2
done
t_up=$((SECONDS - t))
compose ps
echo "up.sh: timing: $PROFILE build ${t_build}s, base image ${t_base}s, docker build ${t_image}s, compose up until healthy ${t_up}s"

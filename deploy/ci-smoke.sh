#!/usr/bin/env bash
# The compose smoke test as CI runs it (from .ci/run), from a clean state to a clean state:
#   1. deploy/down.sh --volumes (leftovers of an interrupted run);
#   2. deploy/up.sh: cargo build (release, or $KEEL_CARGO_PROFILE), base image (debootstrap,
#      once), docker build, compose up, wait healthy;
#   3. deploy/smoke.sh: produce/consume, leader failover, ISR shrink and expansion;
#   4. always (exit trap): on failure the containers' state and last log lines, then
#      deploy/down.sh --volumes, so a rerun starts from empty volumes.
# Installs jq and kcat (needed by smoke.sh) with apt-get when missing, like base-image.sh does for
# debootstrap (root or sudo). Prints the seconds of each phase at the end.
# Environment: as up.sh (CARGO_TARGET_DIR, KEEL_IMAGE, KEEL_BASE_IMAGE, KEEL_UP_TIMEOUT_S,
# KEEL_SKIP_BUILD, KEEL_CARGO_PROFILE) and smoke.sh (KEEL_SMOKE_*); KEEL_SMOKE_LOG_LINES (200) log lines per
# container printed on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
LOG_LINES="${KEEL_SMOKE_LOG_LINES:-200}"

say() { echo "ci-smoke.sh: $*"; }
die() { echo "ci-smoke.sh: FAIL: $*" >&2; exit 1; }

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "cannot reach the Docker daemon"
# shellcheck source=deploy/compose.sh
. "$ROOT/deploy/compose.sh"

missing=()
command -v jq >/dev/null || missing+=(jq)
command -v kcat >/dev/null || missing+=(kcat)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null; then
        SUDO=(sudo)
    else
        die "${missing[*]} missing and installing needs root: run as root or install them"
    fi
    say "installing ${missing[*]} with apt-get"
    "${SUDO[@]}" apt-get update -qq || die "apt-get update failed"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
fi

T0=$SECONDS
t_up=- t_smoke=- t_down=-
phase=start
finish() {
    local rc=$?
    trap - EXIT
    if [ "$rc" -ne 0 ]; then
        echo "ci-smoke.sh: FAIL in phase $phase (exit $rc); container state and last $LOG_LINES log lines:" >&2
        compose ps >&2 || true
        local c
        for c in $(docker ps -a --filter label=com.docker.compose.project=keel --format '{{.Names}}' | sort); do
            echo "----- $c ($(docker inspect -f '{{.State.Status}} health={{if .State.Health}}{{.State.Health.Status}}{{end}} exit={{.State.ExitCode}}' "$c" 2>/dev/null))" >&2
            docker logs --tail "$LOG_LINES" "$c" >&2 2>&1 || true
        done
    fi
    say "tearing down (down --volumes)"
    local t=$SECONDS
    "$ROOT/deploy/down.sh" --volumes || { echo "ci-smoke.sh: down.sh failed" >&2; rc=1; }
    t_down=$((SECONDS - t))
    say "timing: up ${t_up}s, smoke ${t_smoke}s, down ${t_down}s, total $((SECONDS - T0))s"
    if [ "$rc" -eq 0 ]; then
        say "PASS"
    else
        local why=""
        [ -n "${SMOKE_OUT:-}" ] && why="$(grep -m1 '^smoke.sh: FAIL' "$SMOKE_OUT" || true)"
        echo "ci-smoke.sh: FAIL (exit $rc) in phase $phase${why:+: $why}" >&2
    fi
    [ -n "${SMOKE_OUT:-}" ] && rm -f "$SMOKE_OUT"
    exit "$rc"
}
trap finish EXIT

phase=cleanup
"$ROOT/deploy/down.sh" --volumes >/dev/null 2>&1 || true

phase=up
t=$SECONDS
"$ROOT/deploy/up.sh"
t_up=$((SECONDS - t))

phase=smoke
t=$SECONDS
# smoke.sh's output is kept as well, so that its failed check, printed before the containers'
# logs, is repeated as the last line (CI may show only the tail of the run).
SMOKE_OUT="$(mktemp)"
"$ROOT/deploy/smoke.sh" 2>&1 | tee "$SMOKE_OUT"
t_smoke=$((SECONDS - t))
phase=finished

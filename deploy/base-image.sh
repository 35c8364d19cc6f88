#!/usr/bin/env bash
# Creates the local base image the Keel image is built on, without pulling from a registry:
# `debootstrap --variant=minbase bookworm` into a temporary folder, then `docker import`.
#
# Does nothing when the image already exists (idempotent). Needs root (or sudo) for
# debootstrap, and installs debootstrap with apt-get when it is missing.
#
# Environment:
#   KEEL_BASE_IMAGE     image name:tag to create   (default keel/debian-bookworm-slim:bookworm)
#   KEEL_DEBIAN_MIRROR  Debian mirror for debootstrap (default http://deb.debian.org/debian)
set -euo pipefail

IMAGE="${KEEL_BASE_IMAGE:-keel/debian-bookworm-slim:bookworm}"
MIRROR="${KEEL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

die() { echo "base-image.sh: $*" >&2; exit 1; }

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "cannot reach the Docker daemon (is it running? are you in the docker group?)"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "base-image.sh: $IMAGE already exists; nothing to do"
    exit 0
fi

# Root for debootstrap/apt: run directly as root, else through sudo.
if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null; then
    SUDO=(sudo)
else
    die "debootstrap needs root: run as root or install sudo"
fi

if ! command -v debootstrap >/dev/null && [ ! -x /usr/sbin/debootstrap ]; then
    echo "base-image.sh: installing debootstrap with apt-get"
    "${SUDO[@]}" apt-get update -qq || die "apt-get update failed"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap \
        || die "apt-get install debootstrap failed"
fi
DEBOOTSTRAP="$(command -v debootstrap || echo /usr/sbin/debootstrap)"

ROOTFS="$(mktemp -d "${TMPDIR:-/tmp}/keel-rootfs.XXXXXX")"
cleanup() { "${SUDO[@]}" rm -rf --one-file-system "$ROOTFS"; }
trap cleanup EXIT

echo "base-image.sh: debootstrap --variant=minbase bookworm from $MIRROR (a few minutes)"
"${SUDO[@]}" "$DEBOOTSTRAP" --variant=minbase bookworm "$ROOTFS" "$MIRROR" \
    > "$ROOTFS.log" 2>&1 || { tail -n 20 "$ROOTFS.log" >&2; die "debootstrap failed (full log: $ROOTFS.log)"; }
rm -f "$ROOTFS.log"

# Slim it down: package caches and lists are not needed at run time.
"${SUDO[@]}" rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
    "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/*

echo "base-image.sh: importing $ROOTFS as $IMAGE"
"${SUDO[@]}" tar -C "$ROOTFS" --numeric-owner -c . \
    | docker import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$IMAGE" >/dev/null \
    || die "docker import failed"
echo "base-image.sh: created $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"

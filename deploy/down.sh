#!/usr/bin/env bash
# Stops the compose cluster (SIGTERM: brokers run their controlled shutdown).
# `down.sh --volumes` also deletes the named data volumes (all cluster data).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/compose.sh
. deploy/compose.sh
case "${1:-}" in
    "") compose down ;;
    --volumes|-v) compose down --volumes ;;
    *) echo "usage: down.sh [--volumes]" >&2; exit 2 ;;
esac

# shellcheck shell=bash
# Sourced by the deploy scripts: `compose ARGS...` runs Docker Compose (v2 plugin or the
# v1 docker-compose binary) on deploy/docker-compose.yml with project name "keel".
_keel_compose_file="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/docker-compose.yml"
if docker compose version >/dev/null 2>&1; then
    compose() { docker compose -p keel -f "$_keel_compose_file" "$@"; }
elif command -v docker-compose >/dev/null; then
    compose() { docker-compose -p keel -f "$_keel_compose_file" "$@"; }
else
    echo "neither 'docker compose' nor 'docker-compose' is installed" >&2
    exit 1
fi

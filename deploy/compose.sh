# shellcheck shell=bash
# Sourced by the deploy scripts: `compose ARGS...` runs Docker Compose (v2 plugin or the
# v1 docker-compose binary) on deploy/docker-compose.yml with project name "keel".
# With KEEL_TLS=1 docker-compose.tls.yml is layered on top (TLS on every gRPC connection),
# with KEEL_AUTHORIZER=1 (and KEEL_TLS=1) also docker-compose.authz.yml (ACLs).
_keel_deploy_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_keel_compose_files=(-f "$_keel_deploy_dir/docker-compose.yml")
if [ "${KEEL_TLS:-0}" = 1 ]; then
    _keel_compose_files+=(-f "$_keel_deploy_dir/docker-compose.tls.yml")
fi
if [ "${KEEL_AUTHORIZER:-0}" = 1 ]; then
    if [ "${KEEL_TLS:-0}" != 1 ]; then
        echo "KEEL_AUTHORIZER=1 needs KEEL_TLS=1 (principals come from client certificates)" >&2
        exit 1
    fi
    _keel_compose_files+=(-f "$_keel_deploy_dir/docker-compose.authz.yml")
fi
if docker compose version >/dev/null 2>&1; then
    compose() { docker compose -p keel "${_keel_compose_files[@]}" "$@"; }
elif command -v docker-compose >/dev/null; then
    compose() { docker-compose -p keel "${_keel_compose_files[@]}" "$@"; }
else
    echo "neither 'docker compose' nor 'docker-compose' is installed" >&2
    exit 1
fi

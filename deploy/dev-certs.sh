#!/usr/bin/env bash
# Development TLS certificates of the compose cluster (issue #23), made by
# `keelctl tls dev-certs` into deploy/tls/: a CA (kept across runs) and a certificate per
# container (controller-1..3, broker-1..3: CN and DNS SAN = the compose host name, which is
# what peers dial) plus one for keelctl, all also valid for localhost and 127.0.0.1.
# The containers run as an unprivileged user (uid 10001), so the private keys are made
# readable by all (0644) here: development keys only, never for production.
# Usage: deploy/dev-certs.sh [KEELCTL] (default: keelctl next to the build, then PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
KEELCTL="${1:-$(command -v keelctl || true)}"
[ -n "$KEELCTL" ] && [ -x "$KEELCTL" ] || { echo "dev-certs.sh: no keelctl (pass its path)" >&2; exit 1; }
DIR=deploy/tls
"$KEELCTL" tls dev-certs --dir "$DIR" --hosts localhost,127.0.0.1 \
    controller-1 controller-2 controller-3 broker-1 broker-2 broker-3 keelctl >/dev/null
chmod 0644 "$DIR"/*-key.pem
chmod 0600 "$DIR"/ca-key.pem
echo "dev-certs.sh: certificates in $DIR (CA $DIR/ca.pem)"

#!/usr/bin/env bash
# PARTIAL smoke test of the running compose cluster (deploy/up.sh first). It checks only
# what Keel serves today:
#   1. all six containers report healthy (/health/ready);
#   2. quorum: exactly one controller reports keel_controller_active_controller_count 1, and
#      all three agree on the Raft leader;
#   3. broker registration: the controllers' image counts 3 active (unfenced) brokers, and
#      each broker logged its registration.
# Produce/consume checks are NOT here yet: they arrive with the produce/fetch work.
set -euo pipefail
fail() { echo "smoke.sh: FAIL: $*" >&2; exit 1; }
metric() { # container name -> value of the unlabelled sample
    docker exec "$1" keel-http-get 9400 /metrics | awk -v n="$2" '$1 == n {print $2}'
}

for s in controller-1 controller-2 controller-3 broker-1 broker-2 broker-3; do
    state="$(docker inspect -f '{{.State.Health.Status}}' "keel-$s" 2>/dev/null || echo missing)"
    [ "$state" = healthy ] || fail "keel-$s is $state"
done
echo "smoke.sh: ok: 6/6 containers healthy"

active=0
leaders=()
for i in 1 2 3; do
    a="$(metric "keel-controller-$i" keel_controller_active_controller_count)"
    l="$(metric "keel-controller-$i" keel_controller_raft_current_leader)"
    active=$((active + ${a:-0}))
    leaders+=("$l")
done
[ "$active" -eq 1 ] || fail "active controller count sums to $active, expected 1"
[ "${leaders[0]}" = "${leaders[1]}" ] && [ "${leaders[1]}" = "${leaders[2]}" ] \
    || fail "controllers disagree on the leader: ${leaders[*]}"
echo "smoke.sh: ok: one active controller, leader ${leaders[0]} seen by all three"

for i in 1 2 3; do
    n="$(metric "keel-controller-$i" keel_controller_active_broker_count)"
    [ "${n:-0}" = 3 ] || fail "controller-$i counts ${n:-no} active brokers, expected 3"
done
for i in 1 2 3; do
    # (No grep -q: with pipefail, its early exit would fail the pipeline with SIGPIPE.)
    docker logs "keel-broker-$i" 2>&1 | grep "broker 10$i registered with broker epoch" >/dev/null \
        || fail "broker-$i did not log its registration"
done
echo "smoke.sh: ok: brokers 101-103 registered and unfenced"
echo "smoke.sh: PARTIAL smoke passed (health, quorum, registration; no produce/consume yet)"

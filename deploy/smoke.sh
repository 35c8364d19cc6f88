#!/usr/bin/env bash
# Smoke test of the running compose cluster (start it with deploy/up.sh; deploy/ci-smoke.sh
# runs up, this and down). Every check prints `smoke.sh: ok: ...`; the first failed one
# prints `smoke.sh: FAIL: ...` and exits 1.
#   1. all six containers report healthy (/health/ready); one active controller and all
#      three agree on the Raft leader; 3 registered, unfenced brokers;
#   2. creates a topic (3 partitions, replication factor 3, min.insync.replicas=2), produces
#      keyed records with acks=all through `keelctl produce` and reads them back with
#      `keelctl consume`: same bytes, no loss, no duplicate, producer order per partition;
#      then a Kafka client on the host (kcat, librdkafka) lists the 3 brokers on their Kafka
#      listeners and writes 1,000 zstd-compressed records with an idempotent acks=all
#      producer that it reads back exactly, in order (with KEEL_AUTHORIZER=1 kcat, which
#      is User:ANONYMOUS, is first refused with Kafka's authorization error, then allowed
#      by `keelctl acl add`);
#   3. disconnects the container of partition 0's leader (broker X) from the compose network;
#   4. waits until another ISR member leads partition 0 and X is out of every ISR, and finds
#      in the metadata log: X fenced, partition 0's leader change (leader epoch bump) and the
#      ISR shrink;
#   5. produces more records with acks=all (ISR 2 >= min.insync.replicas 2) and reads all back;
#   6. reconnects X under its compose aliases, waits until X is unfenced and back in every ISR,
#      and finds the ISR expansion in the metadata log;
#   7. moves partition 0's leadership back to X (preferred election) and reads everything
#      again, partition 0 now from X's copy.
# keelctl runs inside the controller-1 container: brokers advertise their compose names
# (broker-N:9092), which resolve only on the compose network.
#
# Needs docker, jq and kcat on the host. Environment:
#   KEEL_SMOKE_TOPIC      topic to create (default smoke-<date>; it must not exist)
#   KEEL_SMOKE_RECORDS    records per produce phase (default 2000)
#   KEEL_SMOKE_TIMEOUT_S  bound of each wait for failover / ISR expansion (default 60)
set -euo pipefail

TOPIC="${KEEL_SMOKE_TOPIC:-smoke-$(date -u +%Y%m%d%H%M%S)}"
RECORDS="${KEEL_SMOKE_RECORDS:-2000}"
TIMEOUT_S="${KEEL_SMOKE_TIMEOUT_S:-60}"
PROJECT=keel
CTL_CONTAINER=keel-controller-1
BOOTSTRAP=controller-1:9093,controller-2:9093,controller-3:9093
# Bound of one keelctl command (run with coreutils `timeout` inside the container, so that
# a hung command is killed there and not only its `docker exec`).
KEELCTL_TIMEOUT_S=120

say() { echo "smoke.sh: $*"; }
ok() { echo "smoke.sh: ok: $*"; }
fail() { echo "smoke.sh: FAIL: $*" >&2; exit 1; }

command -v docker >/dev/null || fail "docker is not installed"
command -v jq >/dev/null || fail "jq is not installed (apt-get install jq)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/keel-smoke.XXXXXX")"
# Set while broker X is disconnected: the exit trap reconnects it, so a failed run does not
# leave the cluster cut in two.
DISCONNECTED=""
NETWORK=""
ALIASES=()
cleanup() {
    if [ -n "$DISCONNECTED" ]; then
        say "reconnecting $DISCONNECTED to $NETWORK after the failure"
        docker network connect "${ALIASES[@]/#/--alias=}" "$NETWORK" "$DISCONNECTED" || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# With KEEL_TLS=1 (docker-compose.tls.yml) keelctl connects with its own certificate.
KEELCTL_ENV=(-e KEEL_BOOTSTRAP_CONTROLLERS="$BOOTSTRAP")
if [ "${KEEL_TLS:-0}" = 1 ]; then
    KEELCTL_ENV+=(-e KEEL_TLS_CA_FILE=/etc/keel/tls/ca.pem
        -e KEEL_TLS_CERT_FILE=/etc/keel/tls/keelctl.pem
        -e KEEL_TLS_KEY_FILE=/etc/keel/tls/keelctl-key.pem)
fi
# keelctl ARGS...: keelctl in the controller-1 container, stdin closed.
keelctl() {
    docker exec "${KEELCTL_ENV[@]}" "$CTL_CONTAINER" \
        timeout "$KEELCTL_TIMEOUT_S" keelctl "$@" </dev/null
}
# keelctl_stdin ARGS...: the same, with the script's stdin passed through.
keelctl_stdin() {
    docker exec -i "${KEELCTL_ENV[@]}" "$CTL_CONTAINER" \
        timeout "$KEELCTL_TIMEOUT_S" keelctl "$@"
}
metric() { # container name -> value of the unlabelled sample
    docker exec "$1" keel-http-get 9400 /metrics | awk -v n="$2" '$1 == n {print $2}'
}
# The container of compose service $1 in project keel.
service_container() {
    docker ps -a --filter "label=com.docker.compose.project=$PROJECT" \
        --filter "label=com.docker.compose.service=$1" --format '{{.Names}}'
}
describe() { # -> $WORK/describe.json (the topic's describe --json)
    keelctl topic describe "$TOPIC" --json >"$WORK/describe.json"
}
last_describe() { # the last describe on one line, for failure messages
    jq -c . "$WORK/describe.json" 2>/dev/null || cat "$WORK/describe.json"
}
p0() { # jq expression on partition 0 of the last describe
    jq -r ".[0].partitions[] | select(.partition == 0) | $1" "$WORK/describe.json"
}
metadata_log_json() { # -> $WORK/log.json: the topic's metadata records, one JSON per line
    keelctl metadata log --topic "$TOPIC" --json >"$WORK/log.json"
}
# The fencing changes of broker $1 in the metadata log, e.g. "true\nfalse".
fencing_changes() {
    keelctl metadata log --type BrokerRegistrationChangeRecord --json \
        | jq -r --argjson b "$1" 'select(.fields.broker_id == $b and (.fields | has("fenced")))
              | .fields.fenced'
}

# ---------------------------------------------------------------- 1. health, quorum, brokers
for s in controller-1 controller-2 controller-3 broker-1 broker-2 broker-3; do
    state="$(docker inspect -f '{{.State.Health.Status}}' "keel-$s" 2>/dev/null || echo missing)"
    [ "$state" = healthy ] || fail "keel-$s is $state"
done
ok "6/6 containers healthy"

active=0
leaders=()
for i in 1 2 3; do
    a="$(metric "keel-controller-$i" keel_controller_active_controller_count)"
    l="$(metric "keel-controller-$i" keel_controller_raft_current_leader)"
    active=$((active + ${a:-0}))
    leaders+=("$l")
done
[ "$active" -eq 1 ] || fail "active controller count sums to $active, expected 1"
if [ "${leaders[0]}" != "${leaders[1]}" ] || [ "${leaders[1]}" != "${leaders[2]}" ]; then
    fail "controllers disagree on the leader: ${leaders[*]}"
fi
ok "one active controller, leader ${leaders[0]} seen by all three"

for i in 1 2 3; do
    n="$(metric "keel-controller-$i" keel_controller_active_broker_count)"
    [ "${n:-0}" = 3 ] || fail "controller-$i counts ${n:-no} active brokers, expected 3"
done
for i in 1 2 3; do
    # (No grep -q: with pipefail, its early exit would fail the pipeline with SIGPIPE.)
    docker logs "keel-broker-$i" 2>&1 | grep "broker 10$i registered with broker epoch" >/dev/null \
        || fail "broker-$i did not log its registration"
done
ok "brokers 101-103 registered and unfenced"

if [ "${KEEL_TLS:-0}" = 1 ]; then
    # The nodes serve TLS only: a plaintext client is refused with a line naming the cause.
    if out="$(docker exec -e KEEL_BOOTSTRAP_CONTROLLERS="$BOOTSTRAP" "$CTL_CONTAINER" \
        env -u KEEL_TLS_CA_FILE -u KEEL_TLS_CERT_FILE -u KEEL_TLS_KEY_FILE \
        timeout "$KEELCTL_TIMEOUT_S" keelctl --api-timeout-ms 3000 quorum status 2>&1 </dev/null)"; then
        fail "a plaintext keelctl was served by a TLS cluster: $out"
    fi
    case "$out" in
        *"the server speaks TLS"*) ok "TLS: a plaintext client is refused ($(printf '%s\n' "$out" | tail -n 1 | cut -c1-120)...)" ;;
        *) fail "a plaintext client was refused without naming TLS: $out" ;;
    esac
fi

# ---------------------------------------------------------------- 2. produce and consume
# Records of phase $1: KEY:VALUE lines. Keys spread the records over the partitions and sort
# (byte order) in production order; values carry non-ASCII bytes to check they survive.
records() {
    awk -v p="$1" -v n="$RECORDS" 'BEGIN {
        for (i = 1; i <= n; i++)
            printf "k%d-%06d:phase %d record %06d payload h\303\251llo \342\234\223 =+/ %s\n",
                p, i, p, i, substr("abcdefghijklmnopqrstuvwxyz0123456789", 1 + i % 36)
    }'
}

produce() { # phase: produce records(phase) with acks=all, check every one is acknowledged
    records "$1" >"$WORK/phase-$1.txt"
    local out
    out="$(keelctl_stdin --json produce --topic "$TOPIC" --key-separator : --acks all \
        <"$WORK/phase-$1.txt")" || fail "produce phase $1 failed: $out"
    local acked failed
    acked="$(jq -r .records <<<"$out")" || fail "produce phase $1: not JSON: $out"
    failed="$(jq -r .failed <<<"$out")" || fail "produce phase $1: not JSON: $out"
    if [ "$acked" != "$RECORDS" ] || [ "$failed" != 0 ]; then
        fail "produce phase $1: $acked of $RECORDS acknowledged, $failed failed: $out"
    fi
    ok "produced $RECORDS records with acks=all (phase $1, partitions $(jq -r '.partitions | join(",")' <<<"$out"), $(jq -r .elapsed_ms <<<"$out") ms)"
}

# consume_check LABEL PHASES...: reads the whole topic and compares with the records of PHASES.
consume_check() {
    local label="$1"
    shift
    local expected="$WORK/expected.txt" got="$WORK/got.txt" want=0 p
    : >"$expected"
    for p in "$@"; do
        cat "$WORK/phase-$p.txt" >>"$expected"
        want=$((want + RECORDS))
    done
    # Everything up to the high watermarks seen at the start (no --max-records: an extra
    # record must show). Lines: Partition:P<TAB>Offset:O<TAB>KEY<TAB>VALUE, partitions
    # interleaved, offsets ascending within a partition.
    keelctl consume --topic "$TOPIC" --from-beginning \
        --print-offset --print-key >"$WORK/consumed.txt" 2>"$WORK/consume.err" \
        || fail "$label: consume failed: $(cat "$WORK/consume.err")"
    local n
    n="$(wc -l <"$WORK/consumed.txt")"
    [ "$n" -eq "$want" ] || fail "$label: consumed $n records, expected $want"
    # Per partition: offsets strictly ascending, keys strictly ascending (= production order,
    # no duplicate); every partition holds records.
    awk -F '\t' '
        { sub(/^Partition:/, "", $1); sub(/^Offset:/, "", $2); p = $1; o = $2 + 0
          if ((p in off) && (o <= off[p] || $3 <= key[p])) {
              printf "partition %s: offset %s key %s after offset %s key %s\n", p, o, $3, off[p], key[p]
              bad = 1; exit
          }
          off[p] = o; key[p] = $3; count[p]++ }
        END { if (!bad) for (p = 0; p < 3; p++) if (!(p in count)) { print "partition " p " is empty"; bad = 1 }
              exit bad }' "$WORK/consumed.txt" >"$WORK/order.err" \
        || fail "$label: order: $(cat "$WORK/order.err")"
    # Byte for byte: the KEY:VALUE lines read back are exactly the lines produced.
    awk -F '\t' '{ print $3 ":" $4 }' "$WORK/consumed.txt" | LC_ALL=C sort >"$got"
    LC_ALL=C sort -o "$expected" "$expected"
    cmp -s "$expected" "$got" || {
        diff "$expected" "$got" | head -n 10 >&2
        fail "$label: the records read back differ from those produced"
    }
    ok "$label: read back $want records, byte for byte, in order per partition ($(awk -F '\t' '{c[$1]++} END {for (p in c) printf "%s=%d ", p, c[p]}' "$WORK/consumed.txt" | sed 's/Partition://g; s/ $//'))"
}

keelctl topic create "$TOPIC" --partitions 3 --replication-factor 3 \
    --config min.insync.replicas=2 >/dev/null || fail "topic create $TOPIC failed"
describe || fail "topic describe $TOPIC failed (its error is above)"
[ "$(jq -r '.[0].partitions | length' "$WORK/describe.json")" = 3 ] \
    || fail "topic $TOPIC does not have 3 partitions: $(last_describe)"
ok "created topic $TOPIC (3 partitions, replication factor 3, min.insync.replicas=2)"

produce 1
consume_check "before failover" 1

# Kafka clients on the host: the brokers' PLAINTEXT listeners are published on 127.0.0.1:19291-3.
KAFKA_BOOTSTRAP=127.0.0.1:19291
command -v kcat >/dev/null || fail "kcat is missing on the host (apt-get install kcat)"
kbrokers="$(timeout 30 kcat -L -J -b "$KAFKA_BOOTSTRAP" | jq '.brokers | length')" \
    || fail "kcat -L against $KAFKA_BOOTSTRAP failed"
[ "$kbrokers" = 3 ] || fail "kcat -L lists $kbrokers brokers, expected 3"
keelctl topic create "$TOPIC-kafka" --partitions 1 --replication-factor 3 \
    --config min.insync.replicas=2 >/dev/null || fail "topic create $TOPIC-kafka failed"
seq -f "kafka record %04g" 1 1000 >"$WORK/kafka-sent.txt"
if [ "${KEEL_AUTHORIZER:-0}" = 1 ]; then
    # The plaintext Kafka listener's client is User:ANONYMOUS: refused without ACLs, with
    # Kafka's error, and nothing written; `keelctl acl add` opens the topic.
    if timeout 60 kcat -P -b "$KAFKA_BOOTSTRAP" -t "$TOPIC-kafka" -p 0 \
        <"$WORK/kafka-sent.txt" 2>"$WORK/kcat.err"; then
        fail "kcat produced without an ACL: $(head -n 3 "$WORK/kcat.err")"
    fi
    grep -qi "authorization failed" "$WORK/kcat.err" \
        || fail "kcat was refused without naming authorization: $(head -n 3 "$WORK/kcat.err")"
    keelctl acl add --allow-principal User:ANONYMOUS --producer --topic "$TOPIC-kafka" >/dev/null \
        || fail "acl add --producer failed"
    keelctl acl add --allow-principal User:ANONYMOUS --operation Read --topic "$TOPIC-kafka" >/dev/null \
        || fail "acl add --operation Read failed"
    ok "authorizer: kcat (User:ANONYMOUS) refused without ACLs ($(grep -im1 "authorization failed" "$WORK/kcat.err" | cut -c1-100)), allowed after keelctl acl add"
fi
timeout 60 kcat -P -b "$KAFKA_BOOTSTRAP" -t "$TOPIC-kafka" -p 0 -z zstd \
    -X enable.idempotence=true -X acks=all <"$WORK/kafka-sent.txt" 2>"$WORK/kcat.err" \
    || fail "kcat produce failed: $(cat "$WORK/kcat.err")"
grep -q "Delivery failed" "$WORK/kcat.err" && fail "kcat produce: $(head -n 3 "$WORK/kcat.err")"
timeout 60 kcat -C -b "$KAFKA_BOOTSTRAP" -t "$TOPIC-kafka" -p 0 -o beginning -e -q \
    >"$WORK/kafka-got.txt" || fail "kcat consume failed"
cmp -s "$WORK/kafka-sent.txt" "$WORK/kafka-got.txt" \
    || fail "kcat read back $(wc -l <"$WORK/kafka-got.txt") records, not the 1000 sent in order"
ok "kcat on the host: 3 brokers listed, 1000 zstd records produced (idempotent, acks=all) and read back in order"

# ---------------------------------------------------------------- 3. disconnect the leader
describe || fail "topic describe $TOPIC failed (its error is above)"
X="$(p0 .leader)"
EPOCH0="$(p0 .leader_epoch)"
PREFERRED="$(p0 '.replicas[0]')"
[ "$X" -gt 0 ] || fail "partition 0 has no leader: $(last_describe)"
[ "$(p0 '.isr | length')" = 3 ] || fail "partition 0's ISR is not full: $(p0 '.isr')"
X_HOST="$(keelctl broker list --json | jq -r --argjson b "$X" '.[] | select(.id == $b) | .endpoint' | cut -d: -f1)"
X_CONTAINER="$(service_container "$X_HOST")"
[ -n "$X_CONTAINER" ] || fail "no container for broker $X (endpoint host $X_HOST)"
NETWORK="$(docker network ls --filter "label=com.docker.compose.project=$PROJECT" \
    --filter "label=com.docker.compose.network=keel" --format '{{.Name}}')"
[ -n "$NETWORK" ] || fail "the compose network of project $PROJECT was not found"
# The container's aliases on the network (its service name, which the broker advertises):
# reconnecting must restore them. Docker adds the short container id by itself.
X_ID="$(docker inspect -f '{{.Id}}' "$X_CONTAINER")"
mapfile -t ALIASES < <(docker inspect "$X_CONTAINER" \
    | jq -r --arg n "$NETWORK" --arg id "$X_ID" \
        '.[0].NetworkSettings.Networks[$n].Aliases // [] | .[] | select(. as $a | $id | startswith($a) | not)')
printf '%s\n' "${ALIASES[@]}" | grep -x "$X_HOST" >/dev/null \
    || fail "$X_CONTAINER has no alias $X_HOST on $NETWORK (aliases: ${ALIASES[*]})"
say "partition 0: leader $X ($X_CONTAINER, aliases ${ALIASES[*]}), leader epoch $EPOCH0, ISR $(p0 '.isr | join(",")')"

docker network disconnect "$NETWORK" "$X_CONTAINER"
DISCONNECTED="$X_CONTAINER"
T_CUT=$SECONDS
ok "disconnected $X_CONTAINER from $NETWORK"

# ---------------------------------------------------------------- 4. failover, ISR shrink
# Wait: partition 0 led by another broker, X in no ISR of the topic (the controller fences X
# when its session expires, after broker_session_timeout_ms = 9 s, and removes it from ISRs).
deadline=$((SECONDS + TIMEOUT_S))
while :; do
    describe || true
    if [ -s "$WORK/describe.json" ] && jq -e --argjson x "$X" '
            (.[0].partitions[] | select(.partition == 0) | .leader != $x and .leader > 0)
            and all(.[0].partitions[]; (.isr | index($x)) == null)' \
            "$WORK/describe.json" >/dev/null; then
        break
    fi
    [ $SECONDS -lt $deadline ] || fail "no failover within ${TIMEOUT_S}s: $(last_describe)"
    sleep 1
done
NEW_LEADER="$(p0 .leader)"
EPOCH1="$(p0 .leader_epoch)"
[ "$EPOCH1" -gt "$EPOCH0" ] || fail "partition 0's leader epoch did not grow: $EPOCH0 -> $EPOCH1"
ok "failover after $((SECONDS - T_CUT))s: partition 0 leader $X -> $NEW_LEADER, leader epoch $EPOCH0 -> $EPOCH1, ISR $(p0 '.isr | join(",")'); broker $X in no ISR"

fencing_changes "$X" | tail -n 1 | grep -x true >/dev/null \
    || fail "the metadata log has no BrokerRegistrationChangeRecord fencing broker $X"
ok "metadata log: broker $X fenced (BrokerRegistrationChangeRecord fenced=true)"

metadata_log_json || fail "metadata log --topic $TOPIC failed (its error is above)"
# The partition-0 change that moved the leadership: the state after it has the new leader,
# a higher leader epoch and an ISR without X.
SHRINK="$(jq -c --argjson x "$X" --argjson e "$EPOCH0" '
        select(.record_type == "PartitionChangeRecord" and .fields.partition == 0
               and .partition_state != null
               and .partition_state.leader != $x and .partition_state.leader > 0
               and .partition_state.leader_epoch > $e
               and (.partition_state.isr | index($x)) == null)' "$WORK/log.json" | head -n 1)"
[ -n "$SHRINK" ] || {
    keelctl metadata log --topic "$TOPIC" >&2 || true
    fail "the metadata log of $TOPIC has no partition-0 change electing a leader other than $X with an ISR without $X"
}
SHRINK_OFFSET="$(jq -r .offset <<<"$SHRINK")"
ok "metadata log: partition 0 at offset $SHRINK_OFFSET: leader $(jq -r .partition_state.leader <<<"$SHRINK"), leader epoch $(jq -r .partition_state.leader_epoch <<<"$SHRINK"), ISR [$(jq -r '.partition_state.isr | join(",")' <<<"$SHRINK")] (shrunk from 3, without $X)"

# ---------------------------------------------------------------- 5. produce with X away
produce 2
consume_check "during the outage of broker $X" 1 2

# ---------------------------------------------------------------- 6. reconnect, ISR expands
docker network connect "${ALIASES[@]/#/--alias=}" "$NETWORK" "$X_CONTAINER"
DISCONNECTED=""
T_BACK=$SECONDS
ok "reconnected $X_CONTAINER to $NETWORK with aliases ${ALIASES[*]}"

deadline=$((SECONDS + TIMEOUT_S))
while :; do
    describe || true
    fenced="$(keelctl broker list --json 2>/dev/null \
        | jq -r --argjson b "$X" '.[] | select(.id == $b) | .fenced' || true)"
    if [ "$fenced" = false ] && [ -s "$WORK/describe.json" ] && jq -e '
            all(.[0].partitions[]; (.isr | length) == (.replicas | length))' \
            "$WORK/describe.json" >/dev/null; then
        break
    fi
    [ $SECONDS -lt $deadline ] || {
        docker logs --tail 40 "$X_CONTAINER" >&2 2>&1 || true
        fail "ISR not back to 3 replicas within ${TIMEOUT_S}s of the reconnect (broker $X fenced: ${fenced:-?}): $(last_describe)"
    }
    sleep 1
done
ok "broker $X unfenced and back in every ISR $((SECONDS - T_BACK))s after the reconnect (partition 0 ISR $(p0 '.isr | join(",")'))"

fencing_changes "$X" | tail -n 1 | grep -x false >/dev/null \
    || fail "the metadata log has no BrokerRegistrationChangeRecord unfencing broker $X after its fencing"
metadata_log_json || fail "metadata log --topic $TOPIC failed (its error is above)"
EXPAND="$(jq -c --argjson x "$X" --argjson after "$SHRINK_OFFSET" '
        select(.record_type == "PartitionChangeRecord" and .fields.partition == 0
               and .offset > $after and .partition_state != null
               and (.partition_state.isr | length) == 3
               and (.partition_state.isr | index($x)) != null)' "$WORK/log.json" | head -n 1)"
[ -n "$EXPAND" ] || {
    keelctl metadata log --topic "$TOPIC" >&2 || true
    fail "the metadata log of $TOPIC has no partition-0 change after offset $SHRINK_OFFSET bringing $X back into the ISR"
}
ok "metadata log: broker $X unfenced; partition 0 at offset $(jq -r .offset <<<"$EXPAND"): ISR [$(jq -r '.partition_state.isr | join(",")' <<<"$EXPAND")] (expanded), leader $(jq -r .partition_state.leader <<<"$EXPAND"), leader epoch $(jq -r .partition_state.leader_epoch <<<"$EXPAND")"

# ---------------------------------------------------------------- 7. read again, from X
consume_check "after the reconnect" 1 2
if [ "$PREFERRED" = "$X" ]; then
    keelctl partition elect --topic "$TOPIC" --partition 0 --preferred >/dev/null \
        || fail "preferred election of partition 0 failed"
    describe || fail "topic describe $TOPIC failed (its error is above)"
    [ "$(p0 .leader)" = "$X" ] || fail "partition 0 is led by $(p0 .leader) after a preferred election, expected $X"
    ok "preferred election: partition 0 led by $X again (leader epoch $(p0 .leader_epoch))"
    consume_check "partition 0 read from broker $X's copy" 1 2
else
    say "partition 0's preferred replica is $PREFERRED, not $X: no preferred election"
fi

say "partition 0 in the metadata log:"
keelctl metadata log --topic "$TOPIC" | grep -E 'Partition(Change)?Record .*partition=0 ' | sed 's/^/    /' || true
say "PASS: health, quorum, registration, produce/consume, leader failover, ISR shrink and expansion (topic $TOPIC)"

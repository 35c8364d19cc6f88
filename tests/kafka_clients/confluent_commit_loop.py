"""A consume-and-commit loop with confluent-kafka in group GROUP (#22 acceptance: kill -9 of
the coordinator): reads TOPIC, committing synchronously after every record (a failed commit
is retried for up to 60 s: NOT_COORDINATOR and the like are retriable while the group finds
its new coordinator), until TOTAL records are read. Prints `r <partition> <offset> <value>
<wall ms>` per record on stdout and `progress <n>` every 100 records on stderr. Exits
non-zero on any other error or after 240 s.
Usage: confluent_commit_loop.py BOOTSTRAP TOPIC GROUP TOTAL
"""
import sys
import time

from confluent_kafka import Consumer, KafkaException

bootstrap, topic, group, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
})
c.subscribe([topic])
read = 0
deadline = time.time() + 240
while read < total:
    if time.time() > deadline:
        sys.exit(f"timed out after {read} records")
    msg = c.poll(0.5)
    if msg is None:
        continue
    if msg.error():
        raise KafkaException(msg.error())
    read += 1
    now = int(time.time() * 1000)
    print(f"r {msg.partition()} {msg.offset()} {msg.value().decode()} {now}", flush=True)
    retry_until = time.time() + 60
    while True:
        try:
            c.commit(message=msg, asynchronous=False)
            break
        except KafkaException as e:
            if time.time() > retry_until or not e.args[0].retriable():
                print(f"commit failed: {e}", file=sys.stderr, flush=True)
                raise
            print(f"commit retried: {e}", file=sys.stderr, flush=True)
            time.sleep(0.2)
    if read % 100 == 0:
        print(f"progress {read}", file=sys.stderr, flush=True)
c.close()

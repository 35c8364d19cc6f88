"""A kafka-python group consumer (#22 acceptance): member 1 reads from the beginning until it
has read at least HALF records, committing after every poll, and closes; member 2 joins the
same group and reads on from the committed offsets until every record is read. Every record
read prints `r <member> <partition> <offset> <value>`. Exits non-zero on error or timeout.
Usage: kafka_python_group.py BOOTSTRAP TOPIC GROUP RECORDS
"""
import sys
import time

from kafka import KafkaConsumer

bootstrap, topic, group, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
read = 0


def run(member, stop_at):
    global read
    c = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap.split(","),
        group_id=group,
        client_id=f"keel-test-{member}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    deadline = time.time() + 90
    while read < stop_at:
        if time.time() > deadline:
            sys.exit(f"member {member} timed out after {read} records")
        batches = c.poll(timeout_ms=500, max_records=50)
        for tp, records in batches.items():
            for r in records:
                read += 1
                print(f"r {member} {tp.partition} {r.offset} {r.value.decode()}", flush=True)
        if batches:
            c.commit()
    c.close()


run(1, total // 2)
run(2, total)

"""Consumer groups with confluent-kafka (#22 acceptance), in one process:

1. members A and B subscribe to TOPIC in GROUP; they must split its PARTITIONS partitions
   (disjoint, all covered, each member some) -> prints `split <a-count> <b-count>`;
2. both read, committing synchronously after every record, until half the records are
   read and each member has read some;
3. B closes (LeaveGroup); A must take every partition -> `takeover <count>`;
4. A reads on until THREE_QUARTERS records in all, commits, closes;
5. C joins the group and reads until every record is read -> resumes from the commits.

Every record read prints `r <member> <partition> <offset> <value>` on stdout; progress on
stderr. Exits non-zero on any error or timeout (60 s per phase).
Usage: confluent_group.py BOOTSTRAP TOPIC GROUP PARTITIONS RECORDS
"""
import sys
import time

from confluent_kafka import Consumer, KafkaException

bootstrap, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
partitions, total = int(sys.argv[4]), int(sys.argv[5])
read = 0
by_member = {}


def member(name):
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": f"keel-test-{name}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": "range",
    })
    c.subscribe([topic])
    return c


def step(name, c):
    """Polls once; prints and commits a record if one came."""
    global read
    msg = c.poll(0.1)
    if msg is None:
        return
    if msg.error():
        raise KafkaException(msg.error())
    read += 1
    by_member[name] = by_member.get(name, 0) + 1
    print(f"r {name} {msg.partition()} {msg.offset()} {msg.value().decode()}", flush=True)
    c.commit(message=msg, asynchronous=False)


def phase(what, done, members):
    deadline = time.time() + 60
    while not done():
        if time.time() > deadline:
            sys.exit(f"timed out: {what} (read {read})")
        for name, c in members:
            step(name, c)
    print(f"phase done: {what} (read {read})", file=sys.stderr, flush=True)


def owned(c):
    return {tp.partition for tp in c.assignment()}


a, b = member("a"), member("b")


def split():
    pa, pb = owned(a), owned(b)
    return pa and pb and not (pa & pb) and len(pa | pb) == partitions


phase("A and B split the partitions", split, [("a", a), ("b", b)])
print(f"split {len(owned(a))} {len(owned(b))}", flush=True)
phase("half read, by both members",
      lambda: read >= total // 2 and by_member.get("a") and by_member.get("b"),
      [("a", a), ("b", b)])
b.close()
phase("A takes over", lambda: len(owned(a)) == partitions, [("a", a)])
print(f"takeover {len(owned(a))}", flush=True)
phase("three quarters read", lambda: read >= total * 3 // 4, [("a", a)])
a.close()
c = member("c")
phase("C reads the rest", lambda: read >= total, [("c", c)])
# Nothing more may come: every record was read once.
extra = c.poll(3.0)
if extra is not None and not extra.error():
    sys.exit(f"read beyond the {total} records: {extra.partition()} {extra.offset()}")
c.close()

"""Reads every partition of TOPIC from the beginning with confluent-kafka by assignment
(assign + seek, no consumer group), until each partition's high watermark, and prints one
line per record: `<partition> <offset> <timestamp_ms> <value>`. Then checks
offsets_for_times: for the timestamp of a record in the middle of each non-empty partition
it must return the offset of the first record with that timestamp or later; prints
`offsets_for_times ok <partitions>` on stderr. Exits non-zero on any error.
Usage: confluent_consume.py BOOTSTRAP TOPIC PARTITIONS
"""
import sys
import time

from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING, KafkaError

bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = Consumer({
    # librdkafka requires a group id, but assign() neither joins the group nor commits.
    "group.id": "keel-test-unused",
    "bootstrap.servers": bootstrap,
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
})
tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
consumer.assign(tps)
records = {p: [] for p in range(partitions)}
at_eof = set()
deadline = time.time() + 120
while len(at_eof) < partitions:
    if time.time() > deadline:
        sys.exit(f"timed out; at end of {sorted(at_eof)}")
    msg = consumer.poll(1.0)
    if msg is None:
        continue
    if msg.error():
        if msg.error().code() == KafkaError._PARTITION_EOF:
            at_eof.add(msg.partition())
            continue
        sys.exit(f"consume error: {msg.error()}")
    at_eof.discard(msg.partition())
    ts = msg.timestamp()[1]
    records[msg.partition()].append((msg.offset(), ts, msg.value().decode()))
    sys.stdout.write(f"{msg.partition()} {msg.offset()} {ts} {msg.value().decode()}\n")
sys.stdout.flush()

# offsets_for_times: the first offset whose timestamp is >= the asked one.
asked = []
for p, rs in records.items():
    if rs:
        _, ts, _ = rs[len(rs) // 2]
        asked.append(TopicPartition(topic, p, ts))
answers = consumer.offsets_for_times(asked, timeout=30)
for a in answers:
    if a.error:
        sys.exit(f"offsets_for_times {a.partition}: {a.error}")
    rs = records[a.partition]
    want = next(o for o, ts, _ in rs if ts >= [x.offset for x in asked if x.partition == a.partition][0])
    if a.offset != want:
        sys.exit(f"offsets_for_times partition {a.partition}: got offset {a.offset}, expected {want}")
    # seek there and read one record: it must be that offset.
    consumer.seek(TopicPartition(topic, a.partition, a.offset))
print(f"offsets_for_times ok {len(answers)}", file=sys.stderr)
consumer.close()

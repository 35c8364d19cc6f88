"""A topic's storage format set by Kafka clients through Keel's Kafka listener, as Kafka's
LogValidator applies it: confluent-kafka creates TOPIC (1 partition, replication factor 3)
with compression.type=zstd and message.timestamp.type=LogAppendTime, produces 200
uncompressed records of 2,000 bytes with an old CreateTime (1000 ms), then reads them back:
every record carries the broker's append time (TIMESTAMP_LOG_APPEND_TIME, between the
produce's start and end) and its value intact, both with confluent-kafka and with
kafka-python (timestamp_type 1). An invalid compression.type is refused with
INVALID_CONFIG. Prints one line per step; exits non-zero on any error or mismatch (the caller
then checks the stored codec on disk).
Usage: topic_format.py BOOTSTRAP TOPIC
"""
import sys
import time

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka.structs import TopicPartition as KpTopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": bootstrap})
RECORDS = 200
VALUE = b"z" * 2000

futures = admin.create_topics([NewTopic(topic, 1, 3, config={
    "compression.type": "zstd",
    "message.timestamp.type": "LogAppendTime",
})])
futures[topic].result(30)
print("created")

bad = admin.create_topics([NewTopic(topic + "-bad", 1, 1, config={"compression.type": "brotli"})])
try:
    bad[topic + "-bad"].result(30)
    sys.exit("compression.type=brotli was accepted")
except KafkaException as e:
    err = e.args[0]
    if err.name() != "INVALID_CONFIG":
        sys.exit(f"compression.type=brotli: {err.name()}, expected INVALID_CONFIG")
print("brotli refused INVALID_CONFIG")

# The new topic's leader may need a moment: retry the first delivery failures inside the
# producer (message.timeout.ms), as librdkafka does.
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                     "compression.type": "none", "linger.ms": 5})
failed = []
before_ms = int(time.time() * 1000)
for i in range(RECORDS):
    producer.produce(topic, VALUE, key=str(i).encode(), timestamp=1000,
                     on_delivery=lambda err, _msg: err and failed.append(err))
if producer.flush(60) != 0 or failed:
    sys.exit(f"produce failed: {failed[:3]}")
after_ms = int(time.time() * 1000)
print(f"produced {RECORDS}")

consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                     "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, 0, 0)])
seen = 0
deadline = time.time() + 60
while seen < RECORDS and time.time() < deadline:
    msg = consumer.poll(1.0)
    if msg is None:
        continue
    if msg.error():
        sys.exit(f"consume: {msg.error()}")
    kind, ts = msg.timestamp()
    if kind != TIMESTAMP_LOG_APPEND_TIME or not before_ms - 1000 <= ts <= after_ms + 1000:
        sys.exit(f"offset {msg.offset()}: timestamp {(kind, ts)}, expected the append time "
                 f"in [{before_ms}, {after_ms}]")
    if msg.value() != VALUE or msg.key() != str(msg.offset()).encode():
        sys.exit(f"offset {msg.offset()}: record changed")
    seen += 1
consumer.close()
if seen != RECORDS:
    sys.exit(f"confluent-kafka read {seen} of {RECORDS}")
print("confluent-kafka: log append time on every record")

kp = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                   consumer_timeout_ms=10000)
tp = KpTopicPartition(topic, 0)
kp.assign([tp])
kp.seek_to_beginning(tp)
records = [r for r in kp]
kp.close()
if len(records) != RECORDS:
    sys.exit(f"kafka-python read {len(records)} of {RECORDS}")
for r in records:
    if r.timestamp_type != 1 or not before_ms - 1000 <= r.timestamp <= after_ms + 1000:
        sys.exit(f"kafka-python offset {r.offset}: timestamp {(r.timestamp_type, r.timestamp)}")
    if r.value != VALUE:
        sys.exit(f"kafka-python offset {r.offset}: value changed")
print("kafka-python: log append time on every record")

"""kafka-python with default settings against Keel's Kafka listener: a producer sends COUNT
records to TOPIC (acks=1, the default; batches compressed with COMPRESSION when given: gzip,
lz4 or zstd) and waits for every future; a consumer without a group assigns every partition,
seeks to the beginning and reads until it has COUNT records.
Prints `produced <n>` and `consumed <n>` on stdout, then one `<partition> <offset> <value>`
line per record read. Exits non-zero on any error or a mismatch.
Usage: kafka_python_basic.py BOOTSTRAP TOPIC COUNT [COMPRESSION]
"""
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
compression = sys.argv[4] if len(sys.argv) > 4 else None

producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=compression)
futures = [producer.send(topic, key=f"k{i % 7}".encode(), value=f"kp-{i:05d}".encode())
           for i in range(count)]
producer.flush(timeout=60)
acked = [f.get(timeout=60) for f in futures]
print(f"produced {len(acked)}")
producer.close()

consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
partitions = sorted(consumer.partitions_for_topic(topic))
tps = [TopicPartition(topic, p) for p in partitions]
consumer.assign(tps)
consumer.seek_to_beginning(*tps)
got = []
deadline = time.time() + 60
while len(got) < count and time.time() < deadline:
    for tp, records in consumer.poll(timeout_ms=500).items():
        got.extend((r.partition, r.offset, r.value.decode()) for r in records)
consumer.close()
print(f"consumed {len(got)}")
for p, o, v in got:
    print(p, o, v)
sent = sorted(f"kp-{i:05d}" for i in range(count))
if sorted(v for _, _, v in got) != sent:
    sys.exit(f"read back {len(got)} records that differ from the {count} sent")

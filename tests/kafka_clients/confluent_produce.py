"""Produces COUNT records to TOPIC with confluent-kafka (librdkafka) as an idempotent
acks=all producer and prints every delivery report, one line each:
    ok <partition> <offset> <value>     or     err <value> <error>
plus a `progress <n>` line on stderr every 5,000 reports (the Rust test watches it to kill a
leader in the middle of the stream). Exits 0 when every record was acknowledged.
Usage: confluent_produce.py BOOTSTRAP TOPIC COUNT
"""
import sys

from confluent_kafka import Producer

bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
producer = Producer({
    "bootstrap.servers": bootstrap,
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "message.timeout.ms": 120000,
})
reports = 0
failed = 0
out = sys.stdout


def on_delivery(err, msg):
    global reports, failed
    reports += 1
    value = msg.value().decode()
    if err is not None:
        failed += 1
        out.write(f"err {value} {err}\n")
    else:
        out.write(f"ok {msg.partition()} {msg.offset()} {value}\n")
    if reports % 5000 == 0:
        print(f"progress {reports}", file=sys.stderr, flush=True)


for i in range(count):
    while True:
        try:
            producer.produce(topic, key=f"key-{i % 97}", value=f"value-{i:07d}",
                             on_delivery=on_delivery)
            break
        except BufferError:
            producer.poll(0.05)
    producer.poll(0)
left = producer.flush(150)
out.flush()
print(f"done reports={reports} failed={failed} undelivered={left}", file=sys.stderr, flush=True)
sys.exit(0 if failed == 0 and left == 0 and reports == count else 1)

"""What Keel refuses, as Kafka's own clients see it: each refusal must reach the application
as a clear error at once, never as a parse failure or a retry loop until a timeout.
Prints one line per case:
    create <error name>                 confluent-kafka AdminClient, a 250-character topic name
                                        (librdkafka names INVALID_TOPIC_EXCEPTION TOPIC_EXCEPTION)
    txn <error name> fatal=<bool>       confluent-kafka, init_transactions() with transactional.id
    kp-txn <exception class>            kafka-python, init_transactions() with transactional_id
and on stderr how long each case took (seconds). The Rust test checks the codes; the timeouts
below (60 s) are far longer than a refusal takes, so a client stuck retrying ends with a
_TIMED_OUT / KafkaTimeoutError line instead, and the test fails on it.
Usage: refusals.py BOOTSTRAP
"""
import sys
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap = sys.argv[1]


def took(case, t0):
    print(f"{case} took {time.monotonic() - t0:.2f} s", file=sys.stderr, flush=True)


# A name one past Kafka's 249-character limit: the reply must carry the name as sent so the
# client can pair it with its request (a shortened name was a _BAD_MSG parse failure).
t0 = time.monotonic()
admin = AdminClient({"bootstrap.servers": bootstrap})
futures = admin.create_topics([NewTopic("n" * 250, num_partitions=1, replication_factor=1)],
                              request_timeout=60)
for fut in futures.values():
    try:
        fut.result(timeout=60)
        print("create NONE", flush=True)
    except KafkaException as e:
        print(f"create {e.args[0].name()}", flush=True)
took("create", t0)

t0 = time.monotonic()
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "keel-refusals"})
try:
    producer.init_transactions(60)
    print("txn NONE fatal=False", flush=True)
except KafkaException as e:
    err = e.args[0]
    print(f"txn {err.name()} fatal={err.fatal()}", flush=True)
took("txn", t0)

from kafka import KafkaProducer  # noqa: E402 (kafka-python only for its own case)

t0 = time.monotonic()
kp = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="keel-refusals-kp",
                   max_block_ms=60000)
try:
    kp.init_transactions()
    print("kp-txn none", flush=True)
except Exception as e:  # the class name is what the test checks
    print(f"kp-txn {type(e).__name__}", flush=True)
finally:
    kp.close(timeout=5)
took("kp-txn", t0)

"""confluent-kafka's and kafka-python's admin clients changing a topic through Keel's Kafka
listener, as `kafka-topics.sh --alter --partitions` and `kafka-configs.sh --alter` do:
CreatePartitions (KIP-195) and IncrementalAlterConfigs (KIP-339). Creates TOPIC with 2
partitions (replication factor 3), then with confluent-kafka grows it to 4 partitions, asks
for a preferred leader election that is not needed (ElectLeaders, KIP-460), sets
retention.ms=60000 and reads it back, and is refused a shrink to 2; then with kafka-python
grows it to 6, sets retention.ms=120000 and reverses partition 0's replicas
(AlterPartitionReassignments, ListPartitionReassignments; KIP-455), and reads every broker's
log directory (DescribeLogDirs, KIP-113). Then the legacy AlterConfigs (API 33), which
replaces a topic's whole config set: confluent-kafka's alter_configs sets segment.bytes and
thereby resets retention.ms; kafka-python's (forced to the legacy API) sets retention.ms and
keeps segment.bytes, as it sends the other dynamic keys along. A broker's own resource reports
authorizer.class.name (empty: no authorizer). Then OffsetDelete (KIP-496) with kafka-python:
refused with GROUP_SUBSCRIBED_TO_TOPIC while a confluent-kafka member subscribes to the
topic, done once it left, GROUP_ID_NOT_FOUND for an unknown group. Last, DeleteRecords
(KIP-107): 20 records produced to partition 1, confluent-kafka's delete_records below offset
5, kafka-python's below 12; a consumer from the beginning then starts at 12. Prints one line
per step; exits non-zero on any error or mismatch.
Usage: admin_alter.py BOOTSTRAP TOPIC
"""
import sys
import time

from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewPartitions, NewTopic)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.errors import GroupIdNotFoundError
from kafka.structs import TopicPartition as KpTopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": bootstrap})


def wait_partitions(count):
    deadline = time.time() + 30
    while time.time() < deadline:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == count:
            return
        time.sleep(0.2)
    sys.exit(f"{topic}: {count} partitions not seen: {admin.list_topics(topic).topics}")


def topic_config(key):
    resource = ConfigResource("topic", topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    return configs[key]


def retention_ms():
    return topic_config("retention.ms").value


def wait_config(key, value):
    """Waits until the topic's `key` reads `value` (a broker answers from its own metadata)."""
    deadline = time.time() + 30
    while topic_config(key).value != value:
        if time.time() > deadline:
            sys.exit(f"{key} is {topic_config(key).value}, not {value}")
        time.sleep(0.2)


def wait_retention_ms(value):
    wait_config("retention.ms", value)


admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(timeout=30)
wait_partitions(2)
print("created partitions=2")

admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=30)
wait_partitions(4)
print("confluent create_partitions 4")

# Every partition is led by its preferred replica: nothing to elect (KIP-460).
elected = admin.elect_leaders(ElectionType.PREFERRED,
                              [TopicPartition(topic, 0), TopicPartition(topic, 3)]).result(timeout=30)
codes = sorted({e.name() for e in elected.values() if e is not None})
print(f"confluent elect_leaders {','.join(codes) or 'none'}")

resource = ConfigResource("topic", topic, incremental_configs=[
    ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
for f in admin.incremental_alter_configs([resource]).values():
    f.result(timeout=30)
wait_retention_ms("60000")
print("confluent incremental_alter_configs retention.ms=60000")

try:
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)
    sys.exit("a shrink to 2 partitions was accepted")
except KafkaException as e:
    print(f"confluent shrink refused {e.args[0].name()}")

kp = KafkaAdminClient(bootstrap_servers=bootstrap)
kp.create_partitions({topic: KpNewPartitions(total_count=6)})
wait_partitions(6)
print("kafka-python create_partitions 6")
result = kp.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": "120000"})])
if result.get("topic", {}).get(topic) != "OK":
    sys.exit(f"kafka-python alter_configs: {result}")
wait_retention_ms("120000")
print("kafka-python alter_configs retention.ms=120000")

# kafka-python's reassignment API (KIP-455): partition 0's replicas in reverse order, which
# moves its preferred leader; then nothing is left moving.
before = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].replicas
after = list(reversed(before))
errors = kp.alter_partition_reassignments({KpTopicPartition(topic, 0): after})
if any(e is not None for e in errors.values()):
    sys.exit(f"alter_partition_reassignments: {errors}")
deadline = time.time() + 30
while admin.list_topics(topic, timeout=10).topics[topic].partitions[0].replicas != after:
    if time.time() > deadline:
        sys.exit(f"partition 0 still on {admin.list_topics(topic).topics[topic].partitions[0]}")
    time.sleep(0.2)
while kp.list_partition_reassignments():
    if time.time() > deadline:
        sys.exit(f"still moving: {kp.list_partition_reassignments()}")
    time.sleep(0.2)
print("kafka-python alter_partition_reassignments reversed partition 0")

# kafka-python's describe_log_dirs (KIP-113): every broker reports the topic's partitions it
# hosts (replication factor 3 on 3 brokers: all 6 on each).
dirs = kp.describe_log_dirs(topic_partitions=[topic])
hosted = []
for broker in dirs:
    if len(broker["log_dirs"]) != 1 or broker["log_dirs"][0]["error_code"] != 0:
        sys.exit(f"describe_log_dirs: {dirs}")
    hosted.append(sum(len(t["partitions"]) for t in broker["log_dirs"][0]["topics"]
                      if t["name"] == topic))
if hosted != [6, 6, 6]:
    sys.exit(f"describe_log_dirs: {hosted} partitions per broker: {dirs}")
print("kafka-python describe_log_dirs 6 partitions on each broker")
# The legacy AlterConfigs (API 33): the listed keys become the topic's whole set, so
# retention.ms, set above and not listed, goes back to its default.
resource = ConfigResource("topic", topic, set_config={"segment.bytes": "1048576"})
for f in admin.alter_configs([resource]).values():
    f.result(timeout=30)
wait_config("segment.bytes", "1048576")
source = topic_config("retention.ms").source
if source == 1:  # DYNAMIC_TOPIC_CONFIG: still set on the topic
    sys.exit(f"retention.ms kept after a legacy alter_configs: {topic_config('retention.ms')}")
print("confluent alter_configs segment.bytes=1048576 retention.ms reset")

# kafka-python on the legacy API sends the other dynamic keys along (segment.bytes stays).
result = kp.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": "90000"})],
                          incremental=False)
if result.get("topic", {}).get(topic) != "OK":
    sys.exit(f"kafka-python legacy alter_configs: {result}")
wait_retention_ms("90000")
if topic_config("segment.bytes").value != "1048576":
    sys.exit(f"segment.bytes lost: {topic_config('segment.bytes')}")
print("kafka-python legacy alter_configs retention.ms=90000 segment.bytes=1048576")

# A broker's own config resource: authorizer.class.name, read-only (librdkafka drops
# SECURITY_DISABLED from describe_acls; clients read this instead).
broker = ConfigResource("broker", "1")
configs = admin.describe_configs([broker])[broker].result(timeout=30)
auth = configs.get("authorizer.class.name")
if auth is None or not auth.is_read_only:
    sys.exit(f"authorizer.class.name: {auth}")
print(f"broker 1 authorizer.class.name={auth.value!r}")

# OffsetDelete (KIP-496) with kafka-python's delete_group_offsets.
group = f"{topic}-readers"
member = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                   "auto.offset.reset": "earliest", "enable.auto.commit": False})
member.subscribe([topic])
deadline = time.time() + 60
while not member.assignment():
    if time.time() > deadline:
        sys.exit("the confluent member got no assignment")
    member.poll(0.2)
member.commit(offsets=[TopicPartition(topic, p, 0) for p in range(6)], asynchronous=False)
p0 = KpTopicPartition(topic, 0)
codes = kp.delete_group_offsets(group, [p0])
print(f"kafka-python delete_group_offsets while subscribed {codes[p0].__name__}")
member.close()
deadline = time.time() + 30
while True:
    codes = kp.delete_group_offsets(group, [p0])
    if codes[p0].__name__ != "GroupSubscribedToTopicError" or time.time() > deadline:
        break
    time.sleep(0.2)
left = sorted(tp.partition for tp in kp.list_group_offsets(group)[group])
print(f"kafka-python delete_group_offsets after leaving {codes[p0].__name__} left {left}")
try:
    kp.delete_group_offsets(f"{topic}-nobody", [p0])
    sys.exit("delete_group_offsets of an unknown group succeeded")
except GroupIdNotFoundError:
    print("kafka-python delete_group_offsets unknown group GroupIdNotFoundError")
# DeleteRecords (KIP-107) on partition 1: 20 records, then the first 5 and the first 12 go.
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
for i in range(20):
    producer.produce(topic, value=f"r{i}".encode(), partition=1)
if producer.flush(30) != 0:
    sys.exit("records not delivered")
deleted = admin.delete_records([TopicPartition(topic, 1, 5)])
low = list(deleted.values())[0].result(timeout=30).low_watermark
print(f"confluent delete_records low_watermark={low}")
result = kp.delete_records({KpTopicPartition(topic, 1): 12})
print(f"kafka-python delete_records low_watermark={result[KpTopicPartition(topic, 1)]['low_watermark']}")
reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-after-delete",
                   "auto.offset.reset": "earliest", "enable.auto.commit": False})
reader.assign([TopicPartition(topic, 1, -2)])  # OFFSET_BEGINNING
deadline = time.time() + 30
first = None
while first is None and time.time() < deadline:
    m = reader.poll(0.5)
    if m is not None and m.error() is None:
        first = (m.offset(), m.value().decode())
reader.close()
print(f"first record after delete_records {first}")
kp.close()

"""kafka-python's KafkaAdminClient against Keel's Kafka listener: create a topic (3
partitions, replication factor 3, min.insync.replicas=2), describe it (partitions, leaders,
replicas) and its configs, delete it, and wait until it is gone from the topic list. Prints
one line per step; exits non-zero on any error or mismatch.
Usage: kafka_python_admin.py BOOTSTRAP TOPIC
"""
import sys
import time

from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
admin = KafkaAdminClient(bootstrap_servers=bootstrap)

admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3,
                              topic_configs={"min.insync.replicas": "2"})])
print("created")


def described():
    for t in admin.describe_topics([topic]):
        if t["name"] == topic and t["error_code"] == 0 and len(t["partitions"]) == 3:
            return t
    return None


deadline = time.time() + 30
t = described()
while t is None and time.time() < deadline:
    time.sleep(0.2)
    t = described()
if t is None:
    sys.exit(f"{topic} not described with 3 partitions: {admin.describe_topics([topic])}")
for p in t["partitions"]:
    if len(p["replica_nodes"]) != 3 or p["leader_id"] not in p["replica_nodes"]:
        sys.exit(f"partition {p}")
print("described partitions=3 replicas=3")

configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
text = repr(configs)
if "min.insync.replicas" not in text or "'2'" not in text and '"2"' not in text:
    sys.exit(f"describe_configs: {text[:2000]}")
print("configs min.insync.replicas=2")

admin.delete_topics([topic])
deadline = time.time() + 30
while topic in admin.list_topics():
    if time.time() > deadline:
        sys.exit(f"{topic} still listed after delete")
    time.sleep(0.2)
print("deleted")
admin.close()

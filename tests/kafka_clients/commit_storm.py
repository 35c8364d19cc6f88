"""A commit storm for #22's acceptance ("__consumer_offsets stays bounded"): commits offsets
of every partition of TOPIC for group GROUP as fast as synchronous commits go, for SECONDS,
with confluent-kafka (an administrator's commit: assign, no membership). Prints
`commits <n>` to stdout every 10 s and at the end. Exits non-zero on any commit error.
Usage: commit_storm.py BOOTSTRAP TOPIC PARTITIONS GROUP SECONDS
"""
import sys
import time

from confluent_kafka import Consumer, TopicPartition

bootstrap, topic, partitions, group, seconds = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]))
c = Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "enable.auto.commit": False,
})
assigned = [TopicPartition(topic, p) for p in range(partitions)]
c.assign(assigned)
c.pause(assigned)  # commits only: nothing is fetched
commits = 0
offset = 0
start = time.time()
next_report = start + 10
while time.time() - start < seconds:
    offset += 1
    c.commit(offsets=[TopicPartition(topic, p, offset) for p in range(partitions)],
             asynchronous=False)
    commits += 1
    if time.time() >= next_report:
        print(f"commits {commits}", flush=True)
        next_report += 10
print(f"commits {commits}", flush=True)
c.close()

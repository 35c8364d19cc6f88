"""kafka-python group consumers (#22 acceptance), one thread per member (kafka-python joins a
group inside poll(), blocking until the rebalance completes, so members must poll
concurrently):

1. members 1 and 2 subscribe to TOPIC in GROUP and must split its PARTITIONS partitions
   (disjoint, all covered, each some) -> prints `split <count-1> <count-2>`;
2. both read, committing after every poll, until half the records are read and each member
   has read some;
3. member 2 closes (LeaveGroup); member 1 must take every partition -> `takeover <count>`,
   reads on to three quarters and closes;
4. member 3 joins and reads the rest from the committed offsets.

Every record read prints `r <member> <partition> <offset> <value>`. Exits non-zero on error
or timeout (90 s per phase).
Usage: kafka_python_group.py BOOTSTRAP TOPIC GROUP PARTITIONS RECORDS
"""
import os
import sys
import threading
import time

from kafka import KafkaConsumer

bootstrap, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
partitions, total = int(sys.argv[4]), int(sys.argv[5])
lock = threading.Lock()
read = 0
by_member = {}
owned = {}


class Member(threading.Thread):
    def __init__(self, name, budget):
        super().__init__(daemon=True)
        self.name_ = name
        self.budget = budget  # stop reading (but keep polling) once `read` reaches it
        self.stop = threading.Event()
        self.error = None

    def run(self):
        global read
        try:
            c = KafkaConsumer(
                topic,
                bootstrap_servers=bootstrap.split(","),
                group_id=group,
                client_id=f"keel-test-{self.name_}",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=6000,
                heartbeat_interval_ms=500,
            )
            while not self.stop.is_set():
                with lock:
                    room = self.budget() - read
                if room <= 0:
                    # Paused: keep the membership alive without fetching.
                    c.pause(*c.assignment())
                else:
                    c.resume(*c.paused())
                batches = c.poll(timeout_ms=100, max_records=max(1, min(20, room)))
                with lock:
                    owned[self.name_] = {tp.partition for tp in c.assignment()}
                    for tp, records in batches.items():
                        for r in records:
                            read += 1
                            by_member[self.name_] = by_member.get(self.name_, 0) + 1
                            print(f"r {self.name_} {tp.partition} {r.offset} {r.value.decode()}",
                                  flush=True)
                if batches:
                    c.commit()
            c.close()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.error = e


def wait(what, done, members):
    deadline = time.time() + 90
    while True:
        with lock:
            if done():
                break
        for m in members:
            if m.error is not None:
                sys.exit(f"member {m.name_} failed: {m.error!r}")
        if time.time() > deadline:
            sys.exit(f"timed out: {what} (read {read})")
        time.sleep(0.05)
    print(f"phase done: {what} (read {read})", file=sys.stderr, flush=True)


half = total // 2
budget = {"limit": half}
m1 = Member("1", lambda: budget["limit"])
m2 = Member("2", lambda: budget["limit"])
m1.start()
m2.start()


def split():
    p1, p2 = owned.get("1", set()), owned.get("2", set())
    return p1 and p2 and not (p1 & p2) and len(p1 | p2) == partitions


wait("1 and 2 split the partitions", split, [m1, m2])
# Under the members' lock: print() writes the text and the newline separately, so a
# member's record line could land between them ("split 2 1r 1 0 5 ..." was seen once in CI).
with lock:
    print(f"split {len(owned['1'])} {len(owned['2'])}", flush=True)
wait("half read, by both members",
     lambda: read >= half and by_member.get("1") and by_member.get("2"), [m1, m2])
m2.stop.set()
m2.join(30)
budget["limit"] = total * 3 // 4
wait("1 takes over", lambda: len(owned.get("1", set())) == partitions, [m1])
with lock:
    print(f"takeover {len(owned['1'])}", flush=True)
wait("three quarters read", lambda: read >= total * 3 // 4, [m1])
m1.stop.set()
m1.join(30)
budget["limit"] = total
m3 = Member("3", lambda: budget["limit"])
m3.start()
wait("3 reads the rest", lambda: read >= total, [m3])
m3.stop.set()
m3.join(30)
sys.stdout.flush()
os._exit(0)

"""A random workload of transactions, killed with -9 at random moments.

Workers on their own Qpid Proton connections each run transactions, one
after another: receive one to three requests, accept them in the
transaction, send a reply for each through the request queue to the reply
queue (send-via), and commit or (one time in five) roll back. Each reply
names its transaction and its request. Meanwhile the broker is killed
with -9 at random moments and started again; a worker whose connection
dies records its transaction's outcome as unknown and carries on once
the broker is back.

At the end, after the transfers have settled, what the queues hold must
show no partial transaction:
  - a transaction the client was told committed has all its replies, once
    each, and none of its requests is left; one told rolled back has no
    reply; one whose outcome is unknown has all or nothing;
  - every request is answered by exactly one transaction, or is still in
    the request queue (locked ones included: a peek sees them), never
    both and never neither.
"""

import os
import random
import threading
import time
import uuid

from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

from azure.servicebus import ServiceBusMessage

from harness import BrokerTestCase
from test_transactions import KEY, KEY_NAME, TransferCounts, Via, text

IN, OUT = "rw-requests", "rw-replies"


class Batch(MessagingHandler, TransactionHandler):
    """One transaction: receive up to want requests (waiting at most wait
    seconds for them), accept them, send a reply for each through IN to
    OUT, then commit, or roll back when commit is false."""

    def __init__(self, url, want, commit, wait=2.0):
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.url, self.want, self.commit, self.wait = url, want, commit, wait
        self.txn_id = uuid.uuid4().hex[:12]
        self.requests = []
        self.outcome = None
        self.discharged = False

    def on_start(self, event):
        self.conn = event.container.connect(self.url, allowed_mechs="PLAIN", reconnect=False)
        self.receiver = event.container.create_receiver(self.conn, IN)
        self.sender = event.container.create_sender(self.conn, IN, options=Via(OUT))
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        self.txn = event.transaction
        self.receiver.flow(self.want)
        self.timer = event.container.schedule(self.wait, self)

    def on_message(self, event):
        if self.discharged:
            return
        request = text(event.message)
        self.requests.append(request)
        self.txn.accept(event.delivery)
        self.txn.send(self.sender, Message(body=f"{self.txn_id}:{request}"))
        if len(self.requests) == self.want:
            self.discharge()

    def on_timer_task(self, event):
        if not self.discharged:
            self.discharge()

    def discharge(self):
        self.discharged = True
        self.timer.cancel()  # or the container runs until it fires
        if self.commit and self.requests:
            self.txn.commit()
        else:
            self.txn.abort()

    def on_transaction_committed(self, event):
        self.finish("committed")

    def on_transaction_aborted(self, event):
        self.finish("aborted")

    def on_transaction_commit_failed(self, event):
        self.finish("commit failed")

    def on_transaction_declare_failed(self, event):
        self.finish("declare failed")

    def on_transport_error(self, event):
        self.finish("unknown")

    def on_disconnected(self, event):
        self.finish("unknown")

    def finish(self, outcome):
        if self.outcome is None:
            self.outcome = outcome
        if getattr(self, "timer", None):
            self.timer.cancel()
        self.conn.close()


def run_batch(handler, timeout=20):
    """Runs one transaction; a run the broker's death stalls is unknown."""
    c = Container(handler)
    done = threading.Event()

    def go():
        try:
            c.run()
        except Exception:  # a connection the kill broke mid-frame
            handler.outcome = handler.outcome or "unknown"
        finally:
            done.set()

    threading.Thread(target=go, daemon=True).start()
    if not done.wait(timeout):
        c.stop()
        handler.outcome = handler.outcome or "unknown"
    return handler


class TransactionCrashTest(TransferCounts, BrokerTestCase):
    QUEUES = {IN: {"LockDuration": "PT5S", "MaxDeliveryCount": 1000}, OUT: {}}

    def peek_all(self, queue):
        with self.sb.get_queue_receiver(queue) as r:
            out, seq = [], 0
            while True:
                got = r.peek_messages(max_message_count=100, sequence_number=seq + 1)
                if not got:
                    return out
                out += [text(m) for m in got]
                seq = got[-1].sequence_number

    def test_random_transactions_under_kill_9(self):
        seed = int(os.environ.get("WALBUS_CRASH_SEED") or random.randrange(1 << 30))
        rng = random.Random(seed)
        print("seed (WALBUS_CRASH_SEED draws the same choices again)", seed)
        sent = []
        up = threading.Event()
        up.set()
        stop = threading.Event()
        ledger, lock = [], threading.Lock()

        def top_up(n):
            with self.sb.get_queue_sender(IN) as s:
                batch = [f"req-{len(sent) + i}" for i in range(n)]
                s.send_messages([ServiceBusMessage(b) for b in batch])
                sent.extend(batch)

        def worker(wrng):
            while not stop.is_set():
                up.wait()
                url = f"amqp://{KEY_NAME}:{KEY}@{self.broker.amqp_addr}"
                h = run_batch(Batch(url, wrng.randint(1, 3), wrng.random() >= 0.2))
                with lock:
                    ledger.append(h)
                if h.outcome == "unknown":
                    time.sleep(0.2)  # the broker is down: wait for it

        top_up(60)
        workers = [threading.Thread(target=worker, args=(random.Random(rng.random()),), daemon=True) for _ in range(2)]
        for w in workers:
            w.start()
        for round in range(8):
            time.sleep(rng.uniform(0.3, 1.5))
            up.clear()
            self.broker.proc.send_signal(9)
            self.broker.proc.wait()
            self.broker.start()
            self.sb.close()
            self.__class__.sb = self.broker.client()
            up.set()
            top_up(40)
        time.sleep(1)
        stop.set()
        for w in workers:
            w.join(60)
        self.settled_transfers(IN)

        left = self.peek_all(IN)
        replies = self.peek_all(OUT)
        outcomes = {}
        for h in ledger:
            outcomes[h.outcome] = outcomes.get(h.outcome, 0) + 1
        print("transactions:", outcomes, "requests:", len(sent), "left:", len(left), "replies:", len(replies))

        self.assertEqual(len(replies), len(set(replies)), "a reply twice")
        by_txn = {}
        for r in replies:
            txn, request = r.split(":", 1)
            by_txn.setdefault(txn, []).append(request)
        answered = {}
        for h in ledger:
            got = sorted(by_txn.pop(h.txn_id, []))
            want = sorted(h.requests)
            if h.outcome == "committed":
                self.assertEqual(got, want, f"transaction {h.txn_id}, told committed")
            elif h.outcome in ("aborted", "commit failed", "declare failed"):
                self.assertEqual(got, [], f"transaction {h.txn_id}, told {h.outcome}")
            else:
                self.assertIn(got, ([], want), f"transaction {h.txn_id} of unknown outcome: partial")
            for request in got:
                self.assertNotIn(request, answered, f"{request} answered by two transactions")
                answered[request] = h.txn_id
        self.assertEqual(by_txn, {}, "replies of transactions nobody ran")
        self.assertEqual(len(left), len(set(left)), "a request twice")
        for request in sent:
            self.assertNotEqual(request in answered, request in left,
                                f"{request}: answered {request in answered}, still there {request in left}")
        self.assertGreater(outcomes.get("committed", 0), 0, "no transaction committed")


if __name__ == "__main__":
    import unittest
    unittest.main()

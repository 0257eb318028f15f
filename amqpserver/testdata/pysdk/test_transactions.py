"""Transactions through an independent AMQP 1.0 client with transaction
support: Qpid Proton's Python binding (Debian's python3-qpid-proton),
which declares a transaction on a coordinator link, receives and sends
inside it, and commits or rolls back. The Azure SDK checks what is left.

A transaction touches one entity. A reply to another queue goes through
the request's queue (send-via: a sender attached to the request's queue
with the reply queue as its com.microsoft:transfer-destination-address),
and reaches the reply queue after the commit."""

import os
import random
import signal
import threading
import time

from proton import Message, symbol
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container, LinkOption

from azure.servicebus import ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient

from harness import BrokerTestCase, body

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"


class Via(LinkOption):
    """Makes a sender's messages go through its target to destination."""

    def __init__(self, destination):
        self.destination = destination

    def apply(self, link):
        link.properties = {symbol("com.microsoft:transfer-destination-address"): self.destination}


class ReceiveProcessSend(MessagingHandler, TransactionHandler):
    """Receives one message from queue and, in one transaction, settles it
    (accepted: completed) and sends reply to the same queue, or through it
    to reply_to; then commits, or rolls back when commit is false.
    after_discharge, if set, runs just after the discharge is handed to
    Proton."""

    def __init__(self, url, queue, reply, commit=True, after_discharge=None, reply_to=None):
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.url, self.queue, self.reply, self.commit = url, queue, reply, commit
        self.after_discharge, self.reply_to = after_discharge, reply_to
        self.received = None
        self.outcome = None  # "committed", "aborted", "commit failed: ...", or an error

    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(self.url, allowed_mechs="PLAIN", reconnect=False)
        self.receiver = event.container.create_receiver(self.conn, self.queue)
        via = Via(self.reply_to) if self.reply_to else None
        self.sender = event.container.create_sender(self.conn, self.queue, options=via)
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        self.txn = event.transaction
        self.receiver.flow(1)

    def on_message(self, event):
        self.received = event.message.body
        self.txn.accept(event.delivery)
        self.txn.send(self.sender, Message(body=self.reply))
        if self.commit:
            self.txn.commit()
        else:
            self.txn.abort()
        if self.after_discharge:
            self.after_discharge()

    def on_transaction_committed(self, event):
        self.finish("committed")

    def on_transaction_aborted(self, event):
        self.finish("aborted")

    def on_transaction_commit_failed(self, event):
        self.finish(f"commit failed: {event.delivery.remote.condition}")

    def on_transaction_declare_failed(self, event):
        self.finish(f"declare failed: {event.delivery.remote.condition}")

    def on_transport_error(self, event):
        self.finish(f"transport error: {event.transport.condition}")

    def on_disconnected(self, event):
        self.finish(self.outcome or "disconnected")

    def finish(self, outcome):
        if self.outcome is None:
            self.outcome = outcome
        self.conn.close()


def text(msg):
    """A message's body as str: an amqp-value string as Proton sends it,
    or data sections as the Azure SDK does."""
    b = msg.body
    if isinstance(b, bytes):
        return b.decode()
    if isinstance(b, str):
        return b
    return body(msg)


def run(handler, timeout=30):
    """Runs handler in a Proton container, with a deadline."""
    c = Container(handler)
    c.timeout = timeout
    done = threading.Event()

    def go():
        try:
            c.run()
        finally:
            done.set()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    if not done.wait(timeout):
        c.stop()
        raise AssertionError("the Proton client did not finish")
    return handler


class TransferCounts:
    """For a BrokerTestCase: the administration API's view of what a
    queue's transfer queue holds (it needs the broker's CA)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.saved_bundle = os.environ.get("REQUESTS_CA_BUNDLE")
        os.environ["REQUESTS_CA_BUNDLE"] = cls.broker.ca

    @classmethod
    def tearDownClass(cls):
        if cls.saved_bundle is None:
            os.environ.pop("REQUESTS_CA_BUNDLE", None)
        else:
            os.environ["REQUESTS_CA_BUNDLE"] = cls.saved_bundle
        super().tearDownClass()

    def transfers(self, queue):
        """The messages waiting in queue's transfer queue, by the
        administration API's TransferMessageCount."""
        cs = (f"Endpoint=sb://{self.broker.host}:5671/;"
              f"SharedAccessKeyName={KEY_NAME};SharedAccessKey={KEY}")
        with ServiceBusAdministrationClient.from_connection_string(cs, retry_total=1) as admin:
            return admin.get_queue_runtime_properties(queue).transfer_message_count

    def settled_transfers(self, queue, deadline=15):
        """Waits until queue has no transfer under way."""
        end = time.monotonic() + deadline
        while self.transfers(queue) != 0:
            if time.monotonic() > end:
                raise AssertionError(f"{queue} still has transfers under way")
            time.sleep(0.05)


class TransactionsTest(TransferCounts, BrokerTestCase):
    # A request the killed client had locked stays locked after the
    # restart (its lock was durable) until the lock runs out: short locks
    # let each round start from empty queues.
    QUEUES = {"orders": {}, "rolled": {}, "crash": {"LockDuration": "PT5S"},
              "requests": {}, "replies": {}, "via-crash": {"LockDuration": "PT5S"}, "via-replies": {}}

    def url(self):
        return f"amqp://{KEY_NAME}:{KEY}@{self.broker.amqp_addr}"

    def bodies(self, queue):
        """The bodies queue holds, peeked through the Azure SDK."""
        with self.sb.get_queue_receiver(queue) as r:
            return sorted(text(m) for m in r.peek_messages(max_message_count=50))

    def send(self, queue, text):
        with self.sb.get_queue_sender(queue) as s:
            s.send_messages(ServiceBusMessage(text))

    def test_commit(self):
        self.send("orders", "request")
        h = run(ReceiveProcessSend(self.url(), "orders", "reply"))
        self.assertEqual(h.outcome, "committed")
        self.assertEqual(h.received, b"request")  # the SDK sent it as data
        self.assertEqual(self.bodies("orders"), ["reply"])

    def test_rollback(self):
        self.send("rolled", "request")
        h = run(ReceiveProcessSend(self.url(), "rolled", "reply", commit=False))
        self.assertEqual(h.outcome, "aborted")
        # The request is back (Proton releases what it settled in the
        # transaction); the reply never existed.
        self.assertEqual(self.bodies("rolled"), ["request"])

    def test_send_via_commit(self):
        self.send("requests", "request")
        h = run(ReceiveProcessSend(self.url(), "requests", "reply", reply_to="replies"))
        self.assertEqual(h.outcome, "committed")
        self.settled_transfers("requests")
        self.assertEqual(self.bodies("requests"), [])
        self.assertEqual(self.bodies("replies"), ["reply"])

    def test_send_via_rollback(self):
        self.send("requests", "second request")
        h = run(ReceiveProcessSend(self.url(), "requests", "no reply", commit=False, reply_to="replies"))
        self.assertEqual(h.outcome, "aborted")
        self.assertEqual(self.transfers("requests"), 0)
        self.assertEqual(self.bodies("requests"), ["second request"])
        self.assertNotIn("no reply", self.bodies("replies"))

    def kill_rounds(self, queue, reply_to=None, rounds=6):
        """Rounds of receive-process-send on queue (the reply to queue, or
        through it to reply_to), each with a kill -9 just after the client
        hands over the discharge, and a restart. Returns each round's
        outcome, request, reply, and what queue and reply_to hold after the
        restart and the transfers, and empties them for the next."""
        rounds_seen = []
        for round in range(rounds):
            request, reply = f"request-{round}", f"reply-{round}"
            self.send(queue, request)
            delay = random.uniform(0, 0.004)

            def kill():
                time.sleep(delay)
                self.broker.proc.send_signal(signal.SIGKILL)

            h = run(ReceiveProcessSend(self.url(), queue, reply, reply_to=reply_to,
                                       after_discharge=lambda: threading.Thread(target=kill).start()))
            self.broker.proc.wait()
            self.broker.start()
            held = {queue: self.bodies(queue)}
            if reply_to:
                self.settled_transfers(queue)
                held = {queue: self.bodies(queue), reply_to: self.bodies(reply_to)}
            rounds_seen.append((h.outcome, request, reply, held))
            for q in held:
                end = time.monotonic() + 30
                while self.bodies(q):
                    if time.monotonic() > end:
                        raise AssertionError(f"round {round}: {q} still holds {self.bodies(q)}")
                    with self.sb.get_queue_receiver(q, max_wait_time=1) as r:
                        for m in r.receive_messages(max_message_count=10, max_wait_time=1):
                            r.complete_message(m)
            self.sb.close()
            self.__class__.sb = self.broker.client()
        print("outcomes of the rounds:", [(o, held) for o, _, _, held in rounds_seen])
        return rounds_seen

    def test_kill_9_around_the_commit(self):
        """After the restart either all of the transaction happened or none
        of it, and all of it if the client was told it committed."""
        for round, (outcome, request, reply, held) in enumerate(self.kill_rounds("crash")):
            all_of_it, none = {"crash": [reply]}, {"crash": [request]}
            if outcome == "committed":
                self.assertEqual(held, all_of_it, f"round {round}: told committed")
            else:
                self.assertIn(held, (all_of_it, none), f"round {round} ({outcome}): a partial transaction")

    def test_send_via_kill_9_around_the_commit(self):
        """The same with the reply sent through the request's queue to
        another: after the restart and the transfers, the request is gone
        and the reply is in its queue once, or the request is back and no
        reply exists."""
        for round, (outcome, request, reply, held) in enumerate(self.kill_rounds("via-crash", "via-replies")):
            all_of_it = {"via-crash": [], "via-replies": [reply]}
            none = {"via-crash": [request], "via-replies": []}
            if outcome == "committed":
                self.assertEqual(held, all_of_it, f"round {round}: told committed")
            else:
                self.assertIn(held, (all_of_it, none), f"round {round} ({outcome}): a partial transaction")

if __name__ == "__main__":
    import unittest
    unittest.main()

"""Transactions through an independent AMQP 1.0 client with transaction
support: Qpid Proton's Python binding (Debian's python3-qpid-proton),
which declares a transaction on a coordinator link, receives and sends
inside it, and commits or rolls back. The Azure SDK checks what is left.

The receive-process-send here stays on one queue: a transaction touches
one entity, and send-via (a reply to another queue through this one) is
not built yet."""

import random
import signal
import threading
import time

from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

from azure.servicebus import ServiceBusMessage

from harness import BrokerTestCase, body

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"


class ReceiveProcessSend(MessagingHandler, TransactionHandler):
    """Receives one message from queue and, in one transaction, settles it
    (accepted: completed) and sends reply to the same queue; then commits,
    or rolls back when commit is false. after_discharge, if set, runs just
    after the discharge is handed to Proton."""

    def __init__(self, url, queue, reply, commit=True, after_discharge=None):
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.url, self.queue, self.reply, self.commit = url, queue, reply, commit
        self.after_discharge = after_discharge
        self.received = None
        self.outcome = None  # "committed", "aborted", "commit failed: ...", or an error

    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(self.url, allowed_mechs="PLAIN", reconnect=False)
        self.receiver = event.container.create_receiver(self.conn, self.queue)
        self.sender = event.container.create_sender(self.conn, self.queue)
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


class TransactionsTest(BrokerTestCase):
    QUEUES = {"orders": {}, "rolled": {}, "crash": {}}

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

    def test_kill_9_around_the_commit(self):
        """kill -9 just after the client hands over the discharge: after
        the restart either all of the transaction happened or none of it,
        and all of it if the client was told it committed."""
        outcomes = []
        for round in range(6):
            request, reply = f"request-{round}", f"reply-{round}"
            self.send("crash", request)
            delay = random.uniform(0, 0.004)

            def kill():
                time.sleep(delay)
                self.broker.proc.send_signal(signal.SIGKILL)

            h = run(ReceiveProcessSend(self.url(), "crash", reply,
                                       after_discharge=lambda: threading.Thread(target=kill).start()))
            self.broker.proc.wait()
            self.broker.start()
            left = self.bodies("crash")
            outcomes.append((h.outcome, left))
            if h.outcome == "committed":
                self.assertEqual(left, [reply], f"round {round}: told committed")
            else:
                self.assertIn(left, ([reply], [request]), f"round {round} ({h.outcome}): a partial transaction")
            # Empty the queue for the next round.
            with self.sb.get_queue_receiver("crash", max_wait_time=2) as r:
                for m in r.receive_messages(max_message_count=10, max_wait_time=2):
                    r.complete_message(m)
            self.sb.close()
            self.__class__.sb = self.broker.client()
        print("outcomes of the rounds:", outcomes)


if __name__ == "__main__":
    import unittest
    unittest.main()

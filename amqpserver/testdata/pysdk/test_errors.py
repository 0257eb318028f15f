"""Errors the Python SDK must classify: a missing queue, keys without the
right, a bad key, an oversize message."""

from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusError,
)

from harness import KEY, BrokerTestCase, body, receive_all


class ErrorsTest(BrokerTestCase):
    QUEUES = {"q": {}, "keys": {}, "big": {}}
    EXTRA_ARGS = ("--key", f"sender={KEY}:Send", "--key", f"listener={KEY}:Listen", "--max-message-size", "65536")

    def key_client(self, name, key=KEY):
        cs = f"Endpoint=sb://{self.broker.host}/;SharedAccessKeyName={name};SharedAccessKey={key}"
        return self.broker.client(cs, retry_total=0)

    def test_missing_queue(self):
        # The broker answers the put-token for a missing entity with 404,
        # as Service Bus does. uAMQP reads that reply's description after
        # freeing it, and the SDK reports any put-token failure as an
        # authentication error, so that is what the SDK shows.
        # The same key reaches a queue that exists.
        client = self.key_client("RootManageSharedAccessKey")
        with self.assertRaises(ServiceBusAuthenticationError):
            with client.get_queue_sender("no-such-queue") as s:
                s.send_messages(ServiceBusMessage("x"))
        with client.get_queue_sender("q") as s:
            s.send_messages(ServiceBusMessage("to a queue that exists"))
        with self.sb.get_queue_receiver("q", max_wait_time=5) as r:
            got = receive_all(r, 1)
            self.assertEqual([body(m) for m in got], ["to a queue that exists"])
            r.complete_message(got[0])

    def test_listen_only_key_cannot_send(self):
        with self.assertRaises(ServiceBusAuthorizationError):
            with self.key_client("listener").get_queue_sender("q") as s:
                s.send_messages(ServiceBusMessage("x"))

    def test_send_only_key_cannot_receive(self):
        with self.key_client("sender").get_queue_sender("keys") as s:
            s.send_messages(ServiceBusMessage("sent with Send"))
        with self.assertRaises(ServiceBusAuthorizationError):
            with self.key_client("sender").get_queue_receiver("keys", max_wait_time=2) as r:
                r.receive_messages(max_wait_time=2)
        with self.key_client("listener").get_queue_receiver("keys", max_wait_time=5) as r:
            got = receive_all(r, 1)
            self.assertEqual(len(got), 1)
            r.complete_message(got[0])

    def test_bad_key(self):
        with self.assertRaises(ServiceBusAuthenticationError):
            with self.key_client("RootManageSharedAccessKey", "not-the-key").get_queue_sender("q") as s:
                s.send_messages(ServiceBusMessage("x"))

    def test_oversize_message(self):
        with self.sb.get_queue_sender("big") as s:
            # The SDK sizes batches by the max-message-size of the broker's
            # attach; uAMQP refuses a single message over it itself.
            batch = s.create_message_batch()
            self.assertEqual(batch.max_size_in_bytes, 65536)
            with self.assertRaises(MessageSizeExceededError):
                batch.add_message(ServiceBusMessage(b"x" * 70000))
            with self.assertRaises(ServiceBusError):
                s.send_messages(ServiceBusMessage(b"x" * 70000))
            # The sender goes on.
            s.send_messages(ServiceBusMessage(b"y" * 60000))
        with self.sb.get_queue_receiver("big", max_wait_time=5) as r:
            got = receive_all(r, 2, window=2)
            self.assertEqual([len(b"".join(m.body)) for m in got], [60000])
            r.complete_message(got[0])

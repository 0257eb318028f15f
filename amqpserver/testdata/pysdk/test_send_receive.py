"""Sending and receiving through the Python SDK: properties, batches,
peek-lock settlement, receive-and-delete, deferral, the dead-letter queue,
lock renewal and peeking."""

import datetime
import time
import uuid

from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.amqp import (
    AmqpAnnotatedMessage,
    AmqpMessageBodyType,
    AmqpMessageHeader,
    AmqpMessageProperties,
)
from azure.servicebus.exceptions import MessageLockLostError

from harness import BrokerTestCase, body, receive_all, unique_id


class SendReceiveTest(BrokerTestCase):
    QUEUES = {
        "props": {},
        "batch": {},
        "settle": {"MaxDeliveryCount": 2},
        "rad": {},
        "defer": {},
        "dlq": {},
        "lock": {"LockDuration": "PT2S"},
        "peek": {},
        "stream": {},
        "large": {},
        "raw": {},
    }

    def test_properties_round_trip(self):
        ttl = datetime.timedelta(minutes=7)
        sent = ServiceBusMessage(
            "hello",
            message_id=unique_id("msg"),
            correlation_id="corr-1",
            subject="the subject",
            to="someone",
            reply_to="replies",
            reply_to_session_id="reply-session",
            content_type="text/plain",
            time_to_live=ttl,
            application_properties={"str": "v", "int": 42, "float": 1.5, "bool": True, "neg": -7},
        )
        with self.sb.get_queue_sender("props") as s:
            s.send_messages(sent)
            s.send_messages(ServiceBusMessage("no id"))
        with self.sb.get_queue_receiver("props", max_wait_time=5) as r:
            got = receive_all(r, 2)
            self.assertEqual([body(m) for m in got], ["hello", "no id"])
            m = got[0]
            self.assertEqual(m.message_id, sent.message_id)
            self.assertEqual(m.correlation_id, "corr-1")
            self.assertEqual(m.subject, "the subject")
            self.assertEqual(m.to, "someone")
            self.assertEqual(m.reply_to, "replies")
            self.assertEqual(m.reply_to_session_id, "reply-session")
            self.assertEqual(m.content_type, "text/plain")
            self.assertEqual(m.time_to_live, ttl)
            self.assertEqual(
                m.application_properties,
                {b"str": b"v", b"int": 42, b"float": 1.5, b"bool": True, b"neg": -7},
            )
            self.assertEqual(m.delivery_count, 0)
            self.assertGreater(m.sequence_number, 0)
            self.assertEqual(got[1].sequence_number, m.sequence_number + 1)
            now = datetime.datetime.now(datetime.timezone.utc)
            self.assertLess(abs(m.enqueued_time_utc - now), datetime.timedelta(minutes=1))
            self.assertEqual(m.expires_at_utc, m.enqueued_time_utc + ttl)
            self.assertGreater(m.locked_until_utc, now)
            self.assertIsInstance(m.lock_token, uuid.UUID)
            # A message sent without an id gets one.
            self.assertTrue(got[1].message_id)
            for x in got:
                r.complete_message(x)
            self.assertEqual(r.receive_messages(max_wait_time=1), [])

    def test_batches(self):
        with self.sb.get_queue_sender("batch") as s:
            b = s.create_message_batch()
            self.assertGreater(b.max_size_in_bytes, 0)
            for i in range(50):
                b.add_message(ServiceBusMessage(f"b{i}"))
            s.send_messages(b)
            s.send_messages([ServiceBusMessage(f"l{i}") for i in range(5)])
        with self.sb.get_queue_receiver("batch", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = receive_all(r, 55)
        self.assertEqual([body(m) for m in got], [f"b{i}" for i in range(50)] + [f"l{i}" for i in range(5)])
        seqs = [m.sequence_number for m in got]
        self.assertEqual(seqs, sorted(seqs))

    def test_complete_abandon_dead_letter_after_max_deliveries(self):
        with self.sb.get_queue_sender("settle") as s:
            s.send_messages([ServiceBusMessage("done"), ServiceBusMessage("again")])
        with self.sb.get_queue_receiver("settle", max_wait_time=5) as r:
            first = receive_all(r, 2)
            self.assertEqual([body(m) for m in first], ["done", "again"])
            r.complete_message(first[0])
            r.abandon_message(first[1])
            redelivered = receive_all(r, 1)
            self.assertEqual([body(m) for m in redelivered], ["again"])
            self.assertEqual(redelivered[0].delivery_count, 1)
            r.abandon_message(redelivered[0])  # the second delivery: MaxDeliveryCount 2
            self.assertEqual(r.receive_messages(max_wait_time=1), [])
        with self.sb.get_queue_receiver("settle", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5) as d:
            dead = receive_all(d, 1)
            self.assertEqual([body(m) for m in dead], ["again"])
            self.assertEqual(dead[0].dead_letter_reason, "MaxDeliveryCountExceeded")
            d.complete_message(dead[0])

    def test_receive_and_delete(self):
        with self.sb.get_queue_sender("rad") as s:
            s.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
        with self.sb.get_queue_receiver("rad", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = receive_all(r, 3)
            self.assertEqual([body(m) for m in got], ["m0", "m1", "m2"])
            self.assertIsNone(got[0].locked_until_utc)
        with self.sb.get_queue_receiver("rad", max_wait_time=1) as r:
            self.assertEqual(r.receive_messages(max_wait_time=1), [])

    def test_defer_and_receive_deferred(self):
        with self.sb.get_queue_sender("defer") as s:
            s.send_messages([ServiceBusMessage("later"), ServiceBusMessage("also later")])
        with self.sb.get_queue_receiver("defer", max_wait_time=5) as r:
            got = receive_all(r, 2)
            for m in got:
                r.defer_message(m)
            seqs = [m.sequence_number for m in got]
            self.assertEqual(r.receive_messages(max_wait_time=1), [])
            # Without a sequence number the SDK peeks from the last one it
            # received.
            peeked = r.peek_messages(max_message_count=10, sequence_number=1)
            self.assertEqual([str(p.state) for p in peeked], ["ServiceBusMessageState.DEFERRED"] * 2)
            deferred = r.receive_deferred_messages(seqs)
            self.assertEqual(sorted(body(m) for m in deferred), ["also later", "later"])
            # Settled through $management, as the receiver link never saw them.
            for m in deferred:
                r.complete_message(m)
            self.assertEqual(r.peek_messages(max_message_count=10, sequence_number=1), [])
        with self.sb.get_queue_sender("defer") as s:
            s.send_messages(ServiceBusMessage("deleted on receipt"))
        with self.sb.get_queue_receiver("defer", max_wait_time=5) as r:
            m = receive_all(r, 1)[0]
            r.defer_message(m)
        with self.sb.get_queue_receiver("defer", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = r.receive_deferred_messages([m.sequence_number])
            self.assertEqual([body(x) for x in got], ["deleted on receipt"])
            self.assertEqual(r.peek_messages(max_message_count=10, sequence_number=1), [])

    def test_dead_letter_with_reason(self):
        with self.sb.get_queue_sender("dlq") as s:
            s.send_messages(ServiceBusMessage("bad", application_properties={"keep": "me"}))
        with self.sb.get_queue_receiver("dlq", max_wait_time=5) as r:
            m = receive_all(r, 1)[0]
            r.dead_letter_message(m, reason="broken", error_description="could not parse")
            self.assertEqual(r.receive_messages(max_wait_time=1), [])
        with self.sb.get_queue_receiver("dlq", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=5) as d:
            self.assertEqual(len(d.peek_messages()), 1)
            dead = receive_all(d, 1)
            self.assertEqual([body(x) for x in dead], ["bad"])
            self.assertEqual(dead[0].dead_letter_reason, "broken")
            self.assertEqual(dead[0].dead_letter_error_description, "could not parse")
            self.assertEqual(dead[0].application_properties[b"keep"], b"me")
            d.complete_message(dead[0])
            self.assertEqual(d.peek_messages(), [])

    def test_renew_and_lose_lock(self):
        with self.sb.get_queue_sender("lock") as s:
            s.send_messages(ServiceBusMessage("held"))
        with self.sb.get_queue_receiver("lock", max_wait_time=5) as r:
            m = receive_all(r, 1)[0]
            before = m.locked_until_utc
            time.sleep(0.5)
            renewed = r.renew_message_lock(m)
            self.assertGreater(renewed, before)
            self.assertEqual(m.locked_until_utc, renewed)
            time.sleep(3)  # past the 2 s lock
            # Settling is refused by the SDK itself once the lock time has
            # passed (uAMQP cannot read a disposition's outcome); renewing
            # asks the broker, which has released the lock.
            with self.assertRaises(MessageLockLostError):
                r.renew_message_lock(m)
            again = receive_all(r, 1)
            self.assertEqual([body(x) for x in again], ["held"])
            self.assertEqual(again[0].delivery_count, 1)
            r.complete_message(again[0])

    def test_peek_pages_through_every_state(self):
        with self.sb.get_queue_sender("peek") as s:
            s.send_messages([ServiceBusMessage(f"p{i}") for i in range(6)])
            later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
            s.schedule_messages(ServiceBusMessage("scheduled"), later)
        with self.sb.get_queue_receiver("peek", max_wait_time=5) as r:
            held = receive_all(r, 2)
            r.defer_message(held[1])
            first = r.peek_messages(max_message_count=4, sequence_number=1)
            self.assertEqual([body(m) for m in first], ["p0", "p1", "p2", "p3"])
            rest = r.peek_messages(max_message_count=10, sequence_number=first[-1].sequence_number + 1)
            self.assertEqual([body(m) for m in rest], ["p4", "p5", "scheduled"])
            states = [str(m.state).rsplit(".", 1)[1] for m in first + rest]
            self.assertEqual(states, ["ACTIVE", "DEFERRED", "ACTIVE", "ACTIVE", "ACTIVE", "ACTIVE", "SCHEDULED"])
            # Peeking takes no lock: the locked message still settles.
            r.complete_message(held[0])

    def test_iterating_a_receiver_takes_a_steady_stream(self):
        n = 200
        with self.sb.get_queue_sender("stream") as s:
            s.send_messages([ServiceBusMessage(f"s{i}") for i in range(n // 2)])
        seen = []
        with self.sb.get_queue_receiver("stream", max_wait_time=5, prefetch_count=20) as r, \
                self.sb.get_queue_sender("stream") as s:
            for m in r:
                seen.append(body(m))
                r.complete_message(m)
                if len(seen) == n // 2:
                    # More arrive while the receiver is iterating.
                    s.send_messages([ServiceBusMessage(f"s{i}") for i in range(n // 2, n)])
                if len(seen) == n:
                    break
        self.assertEqual(seen, [f"s{i}" for i in range(n)])

    def test_large_messages_span_many_frames(self):
        # Larger than a frame each way (uAMQP's and walbus's max-frame-size),
        # under the 1 MB max-message-size.
        payloads = [bytes([i]) * 900_000 for i in range(1, 4)]
        with self.sb.get_queue_sender("large") as s:
            for p in payloads:
                s.send_messages(ServiceBusMessage(p))
        with self.sb.get_queue_receiver("large", max_wait_time=5) as r:
            got = receive_all(r, 3)
            self.assertEqual([b"".join(m.body) for m in got], payloads)
            for m in got:
                r.complete_message(m)

    def test_raw_amqp_messages(self):
        # AMQP value and sequence bodies, and a message with every section:
        # uAMQP writes its footer and delivery annotations before the body,
        # out of the grammar's order, and the broker puts them in order.
        sent = [
            AmqpAnnotatedMessage(value_body={"k": 1, "list": [1, "two"]}),
            AmqpAnnotatedMessage(sequence_body=[[1, 2], ["a"]]),
            AmqpAnnotatedMessage(
                data_body=[b"part1", b"part2"],
                header=AmqpMessageHeader(priority=7),
                footer={"f": "foot"},
                delivery_annotations={"da": 1},
                annotations={"x-custom": "ann"},
                properties=AmqpMessageProperties(message_id="raw-1", user_id=b"user", content_encoding="gzip"),
                application_properties={"a": 1},
            ),
        ]
        with self.sb.get_queue_sender("raw") as s:
            for m in sent:
                s.send_messages(m)
        with self.sb.get_queue_receiver("raw", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = [m.raw_amqp_message for m in receive_all(r, 3)]
        self.assertEqual([m.body_type for m in got],
                         [AmqpMessageBodyType.VALUE, AmqpMessageBodyType.SEQUENCE, AmqpMessageBodyType.DATA])
        self.assertEqual(got[0].body, {b"k": 1, b"list": [1, b"two"]})
        self.assertEqual(list(got[1].body), [[1, 2], [b"a"]])
        full = got[2]
        self.assertEqual(list(full.body), [b"part1", b"part2"])
        self.assertEqual(full.footer, {b"f": b"foot"})
        # Service Bus hands over the sender's delivery annotations too.
        self.assertEqual(full.delivery_annotations, {b"da": 1})
        self.assertEqual(full.header.priority, 7)
        self.assertEqual(full.annotations[b"x-custom"], b"ann")
        self.assertEqual(full.properties.message_id, b"raw-1")
        self.assertEqual(full.properties.user_id, b"user")
        self.assertEqual(full.properties.content_encoding, b"gzip")
        self.assertEqual(full.application_properties, {b"a": 1})

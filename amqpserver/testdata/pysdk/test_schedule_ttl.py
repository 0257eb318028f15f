"""Scheduled messages, time to live and duplicate detection through the
Python SDK."""

import datetime
import time

from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue

from harness import BrokerTestCase, body, receive_all, unique_id


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc)


class ScheduleTTLTest(BrokerTestCase):
    QUEUES = {
        "sched": {},
        "cancel": {},
        "ttl": {},
        "ttl-dlq": {"DeadLetteringOnMessageExpiration": True},
        "capped": {"DefaultMessageTimeToLive": "PT2S"},
        "dedup": {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT1M"},
    }

    def test_schedule_messages(self):
        at = utc_now() + datetime.timedelta(seconds=2)
        with self.sb.get_queue_sender("sched") as s:
            seqs = s.schedule_messages([ServiceBusMessage("s1"), ServiceBusMessage("s2")], at)
            self.assertEqual(len(seqs), 2)
            s.send_messages(ServiceBusMessage("by property", scheduled_enqueue_time_utc=at))
        with self.sb.get_queue_receiver("sched", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            peeked = r.peek_messages(max_message_count=10, sequence_number=1)
            self.assertEqual([str(m.state).rsplit(".", 1)[1] for m in peeked], ["SCHEDULED"] * 3)
            self.assertEqual([m.sequence_number for m in peeked][:2], seqs)
            got = receive_all(r, 3, window=10)
        self.assertEqual(sorted(body(m) for m in got), ["by property", "s1", "s2"])
        for m in got:
            # Whole milliseconds on the wire.
            self.assertGreaterEqual(m.enqueued_time_utc, at.replace(microsecond=at.microsecond // 1000 * 1000))
            self.assertNotIn(m.sequence_number, seqs)

    def test_cancel_scheduled_messages(self):
        at = utc_now() + datetime.timedelta(seconds=2)
        with self.sb.get_queue_sender("cancel") as s:
            seqs = s.schedule_messages([ServiceBusMessage("gone"), ServiceBusMessage("kept")], at)
            s.cancel_scheduled_messages(seqs[0])
        with self.sb.get_queue_receiver("cancel", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = receive_all(r, 2, window=6)
        self.assertEqual([body(m) for m in got], ["kept"])

    def test_expired_messages_are_never_received(self):
        with self.sb.get_queue_sender("ttl") as s:
            s.send_messages(ServiceBusMessage("short", time_to_live=datetime.timedelta(seconds=1)))
            s.send_messages(ServiceBusMessage("long"))
        time.sleep(1.5)
        with self.sb.get_queue_receiver("ttl", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = receive_all(r, 2, window=2)
        self.assertEqual([body(m) for m in got], ["long"])

    def test_expiry_dead_letters_when_configured(self):
        with self.sb.get_queue_sender("ttl-dlq") as s:
            s.send_messages(ServiceBusMessage("expiring", time_to_live=datetime.timedelta(seconds=1)))
        time.sleep(1.5)
        with self.sb.get_queue_receiver("ttl-dlq", max_wait_time=2) as r:
            self.assertEqual(r.receive_messages(max_wait_time=2), [])
        with self.sb.get_queue_receiver("ttl-dlq", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as d:
            dead = receive_all(d, 1, window=5)
            self.assertEqual([body(m) for m in dead], ["expiring"])
            self.assertEqual(dead[0].dead_letter_reason, "TTLExpiredException")
            # Set only once a dead-lettered message is forwarded on.
            self.assertIsNone(dead[0].dead_letter_source)
            d.complete_message(dead[0])

    def test_entity_default_caps_the_ttl(self):
        with self.sb.get_queue_sender("capped") as s:
            s.send_messages(ServiceBusMessage("capped", time_to_live=datetime.timedelta(hours=1)))
        with self.sb.get_queue_receiver("capped", max_wait_time=5) as r:
            peeked = r.peek_messages(sequence_number=1)
            self.assertEqual(peeked[0].time_to_live, datetime.timedelta(seconds=2))
            time.sleep(2.5)
            self.assertEqual(r.receive_messages(max_wait_time=2), [])

    def test_duplicates_are_dropped(self):
        mid = unique_id("dup")
        with self.sb.get_queue_sender("dedup") as s:
            s.send_messages(ServiceBusMessage("first", message_id=mid))
            s.send_messages(ServiceBusMessage("second", message_id=mid))
            s.send_messages(ServiceBusMessage("other", message_id=unique_id("dup")))
        with self.sb.get_queue_receiver("dedup", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = receive_all(r, 3, window=2)
        self.assertEqual([body(m) for m in got], ["first", "other"])

"""Sessions through the Python SDK: named and next-available sessions,
FIFO within a session, session state, lock renewal and the errors."""

import datetime

from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusError,
    SessionCannotBeLockedError,
)

from harness import BrokerTestCase, body, receive_all, unique_id


class SessionsTest(BrokerTestCase):
    QUEUES = {
        "fifo": {"RequiresSession": True},
        "next": {"RequiresSession": True},
        "state": {"RequiresSession": True},
        "locked": {"RequiresSession": True},
        "empty": {"RequiresSession": True},
    }
    # The SDK names no com.microsoft:timeout when it asks for the next
    # available session; the broker's wait for one is 60 s by default.
    EXTRA_ARGS = ("--session-wait", "2s")

    def test_fifo_within_a_session(self):
        a, b = unique_id("a"), unique_id("b")
        with self.sb.get_queue_sender("fifo") as s:
            s.send_messages([ServiceBusMessage(f"{sid}-{i}", session_id=sid) for i in range(5) for sid in (a, b)])
        for sid in (a, b):
            with self.sb.get_queue_receiver("fifo", session_id=sid, max_wait_time=5) as r:
                self.assertEqual(r.session.session_id, sid)
                got = receive_all(r, 5)
                self.assertEqual([body(m) for m in got], [f"{sid}-{i}" for i in range(5)])
                self.assertTrue(all(m.session_id == sid for m in got))
                for m in got:
                    r.complete_message(m)

    def test_next_available_session(self):
        sid = unique_id("next")
        with self.sb.get_queue_sender("next") as s:
            s.send_messages(ServiceBusMessage("only", session_id=sid))
        with self.sb.get_queue_receiver("next", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5) as r:
            self.assertEqual(r.session.session_id, sid)
            got = receive_all(r, 1)
            self.assertEqual([body(m) for m in got], ["only"])
            r.complete_message(got[0])
        # None left: the broker answers the attach with com.microsoft:timeout.
        with self.assertRaises(OperationTimeoutError):
            with self.sb.get_queue_receiver("next", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2) as r:
                r.receive_messages(max_wait_time=2)

    def test_session_state_and_lock_renewal(self):
        sid = unique_id("state")
        with self.sb.get_queue_receiver("state", session_id=sid, max_wait_time=5) as r:
            session = r.session
            self.assertFalse(session.get_state())
            session.set_state(b"checkpoint 1")
            self.assertEqual(session.get_state(), b"checkpoint 1")
            before = session.locked_until_utc
            self.assertGreater(before, datetime.datetime.now(datetime.timezone.utc))
            renewed = session.renew_lock()
            self.assertGreaterEqual(renewed, before)
        # The state outlives the receiver.
        with self.sb.get_queue_receiver("state", session_id=sid, max_wait_time=5) as r:
            self.assertEqual(r.session.get_state(), b"checkpoint 1")

    def test_a_locked_session_is_refused(self):
        sid = unique_id("held")
        with self.sb.get_queue_sender("locked") as s:
            s.send_messages(ServiceBusMessage("x", session_id=sid))
        with self.sb.get_queue_receiver("locked", session_id=sid, max_wait_time=5) as r:
            got = receive_all(r, 1)
            other = self.broker.client(retry_total=0)
            with self.assertRaises(SessionCannotBeLockedError):
                with other.get_queue_receiver("locked", session_id=sid, max_wait_time=2) as r2:
                    r2.receive_messages(max_wait_time=2)
            r.complete_message(got[0])

    def test_an_empty_named_session_can_be_accepted(self):
        with self.sb.get_queue_receiver("empty", session_id=unique_id("none"), max_wait_time=1) as r:
            self.assertEqual(r.receive_messages(max_wait_time=1), [])

    def test_a_receiver_without_a_session_is_refused(self):
        with self.assertRaises(ServiceBusError):
            with self.sb.get_queue_receiver("empty", max_wait_time=2) as r:
                r.receive_messages(max_wait_time=2)

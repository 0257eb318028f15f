"""Auto-forwarding and the SDK's AutoLockRenewer through the Python SDK."""

import time

from azure.servicebus import AutoLockRenewer, ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue

from harness import BrokerTestCase, body, receive_all


class ForwardRenewTest(BrokerTestCase):
    QUEUES = {
        "src": {"ForwardTo": "dst"},
        "dst": {},
        "dlsrc": {"ForwardDeadLetteredMessagesTo": "dldst"},
        "dldst": {},
        "held": {"LockDuration": "PT5S"},
        "held-sessions": {"LockDuration": "PT5S", "RequiresSession": True},
    }

    def test_forward_to(self):
        with self.sb.get_queue_sender("src") as s:
            s.send_messages([ServiceBusMessage(f"f{i}") for i in range(3)])
        with self.sb.get_queue_receiver("dst", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = receive_all(r, 3)
        self.assertEqual([body(m) for m in got], ["f0", "f1", "f2"])
        with self.sb.get_queue_receiver("src") as r:
            self.assertEqual(r.peek_messages(10, sequence_number=1), [])

    def test_dead_letters_forwarded(self):
        with self.sb.get_queue_sender("dlsrc") as s:
            s.send_messages(ServiceBusMessage("doomed"))
        with self.sb.get_queue_receiver("dlsrc", max_wait_time=5) as r:
            m = receive_all(r, 1)[0]
            r.dead_letter_message(m, reason="why", error_description="because")
        with self.sb.get_queue_receiver("dldst", max_wait_time=5) as r:
            got = receive_all(r, 1)
            self.assertEqual([body(x) for x in got], ["doomed"])
            self.assertEqual(got[0].dead_letter_reason, "why")
            self.assertEqual(got[0].dead_letter_source, "dlsrc")
            r.complete_message(got[0])
        with self.sb.get_queue_receiver("dlsrc", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as d:
            self.assertEqual(d.peek_messages(10, sequence_number=1), [])

    def test_auto_lock_renewer_keeps_a_message_locked(self):
        with self.sb.get_queue_sender("held") as s:
            s.send_messages(ServiceBusMessage("slow work"))
        renewer = AutoLockRenewer(max_lock_renewal_duration=30)
        try:
            with self.sb.get_queue_receiver("held", max_wait_time=5) as r:
                m = receive_all(r, 1)[0]
                first = m.locked_until_utc
                renewer.register(r, m)
                time.sleep(11)  # more than two 5 s locks (the renewer wakes about every second)
                self.assertGreater(m.locked_until_utc, first)
                # Still ours: nobody else receives it, and it completes. (A
                # client of its own: the SDK's handlers share their client's
                # connection, and a receive holds it while it waits.)
                with self.broker.client().get_queue_receiver("held", max_wait_time=1) as other:
                    self.assertEqual(other.receive_messages(max_wait_time=1), [])
                r.complete_message(m)
        finally:
            renewer.close()

    def test_auto_lock_renewer_keeps_a_session_locked(self):
        with self.sb.get_queue_sender("held-sessions") as s:
            s.send_messages([ServiceBusMessage("a", session_id="s"), ServiceBusMessage("b", session_id="s")])
        renewer = AutoLockRenewer(max_lock_renewal_duration=30)
        try:
            with self.sb.get_queue_receiver("held-sessions", session_id="s", max_wait_time=5) as r:
                renewer.register(r, r.session)
                first = r.session.locked_until_utc
                got = receive_all(r, 1)
                time.sleep(11)
                self.assertGreater(r.session.locked_until_utc, first)
                r.complete_message(got[0])
                rest = receive_all(r, 1)
                self.assertEqual([body(m) for m in rest], ["b"])
                r.complete_message(rest[0])
        finally:
            renewer.close()

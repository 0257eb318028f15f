"""The Python SDK across broker restarts: a sender and a receiver carry on
after a graceful restart and after kill -9, nothing the broker
acknowledged is lost, and no completed message comes back."""

import time

from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode

from harness import BrokerTestCase, body, receive_all


class RecoveryTest(BrokerTestCase):
    QUEUES = {"durable": {}, "receiving": {}}

    def test_restart_and_crash(self):
        sender = self.sb.get_queue_sender("durable")
        sent = []
        for phase, crash in (("a", False), ("b", True), ("c", False)):
            for i in range(20):
                sender.send_messages(ServiceBusMessage(f"{phase}{i}"))
                sent.append(f"{phase}{i}")
            if phase != "c":
                # The same sender goes on after the broker comes back.
                self.broker.restart(crash=crash)
        sender.close()
        with self.sb.get_queue_receiver("durable", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = receive_all(r, len(sent))
        self.assertEqual([body(m) for m in got], sent)

    def test_a_receiver_carries_on_after_kill_9(self):
        with self.sb.get_queue_sender("receiving") as s:
            s.send_messages([ServiceBusMessage(f"m{i}") for i in range(6)])
        with self.sb.get_queue_receiver("receiving", max_wait_time=5) as r:
            first = receive_all(r, 3)
            for m in first:
                r.complete_message(m)
            # uAMQP settles without waiting for the broker's answer, so the
            # test waits until the completions are applied (a peek no longer
            # shows them) and then for a send acknowledged after its fsync:
            # its record follows theirs in the log, so they are durable too.
            deadline = time.monotonic() + 10
            while len(r.peek_messages(max_message_count=10, sequence_number=1)) != 3:
                self.assertLess(time.monotonic(), deadline, "the completions were not applied")
                time.sleep(0.02)
            with self.sb.get_queue_sender("receiving") as s:
                s.send_messages(ServiceBusMessage("after"))
            self.broker.restart(crash=True)
            rest = receive_all(r, 4)
            for m in rest:
                r.complete_message(m)
        self.assertEqual([body(m) for m in first + rest], [f"m{i}" for i in range(6)] + ["after"])
        with self.sb.get_queue_receiver("receiving", max_wait_time=2) as r:
            self.assertEqual(r.receive_messages(max_wait_time=2), [])

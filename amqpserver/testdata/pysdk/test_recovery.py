"""The Python SDK across broker restarts: a client carries on after a
graceful restart and after kill -9, and nothing the broker acknowledged
is lost."""

from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode

from harness import BrokerTestCase, body, receive_all


class RecoveryTest(BrokerTestCase):
    QUEUES = {"durable": {}}

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

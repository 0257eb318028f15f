"""The Python SDK's asyncio API (azure.servicebus.aio), which drives uAMQP
through its own async layer: sends, peek-lock settlement, deferral,
sessions and iteration."""

import asyncio

from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from harness import BrokerTestCase, body, unique_id


class AsyncTest(BrokerTestCase):
    QUEUES = {"q": {}, "sessions": {"RequiresSession": True}}

    def client(self):
        return ServiceBusClient.from_connection_string(
            self.broker.connection_string, connection_verify=self.broker.ca, retry_total=2)

    def test_send_receive_settle(self):
        async def scenario():
            async with self.client() as c:
                async with c.get_queue_sender("q") as s:
                    await s.send_messages([ServiceBusMessage(f"a{i}") for i in range(6)])
                async with c.get_queue_receiver("q", max_wait_time=5) as r:
                    got = []
                    while len(got) < 6:
                        batch = await r.receive_messages(max_message_count=6 - len(got), max_wait_time=5)
                        self.assertTrue(batch, "receive_messages returned nothing")
                        got.extend(batch)
                    self.assertEqual([body(m) for m in got], [f"a{i}" for i in range(6)])
                    for m in got[:3]:
                        await r.complete_message(m)
                    await r.abandon_message(got[3])
                    await r.defer_message(got[4])
                    await r.dead_letter_message(got[5], reason="async")
                    again = await r.receive_messages(max_wait_time=5)
                    self.assertEqual([(body(m), m.delivery_count) for m in again], [("a3", 1)])
                    await r.complete_message(again[0])
                    deferred = await r.receive_deferred_messages([got[4].sequence_number])
                    self.assertEqual([body(m) for m in deferred], ["a4"])
                    await r.complete_message(deferred[0])
                    self.assertEqual(await r.peek_messages(10, sequence_number=1), [])

        asyncio.run(scenario())

    def test_sessions(self):
        sid = unique_id("s")

        async def scenario():
            async with self.client() as c:
                async with c.get_queue_sender("sessions") as s:
                    await s.send_messages([ServiceBusMessage(f"{i}", session_id=sid) for i in range(4)])
                async with c.get_queue_receiver("sessions", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5) as r:
                    self.assertEqual(r.session.session_id, sid)
                    await r.session.set_state(b"half")
                    self.assertEqual(await r.session.get_state(), b"half")
                    seen = []
                    async for m in r:
                        seen.append(body(m))
                        await r.complete_message(m)
                        if len(seen) == 4:
                            break
                    self.assertEqual(seen, ["0", "1", "2", "3"])

        asyncio.run(scenario())

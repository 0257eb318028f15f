"""AMQP over WebSockets: TransportType.AmqpOverWebsocket with
custom_endpoint_address naming the broker's amqps port. The SDK alone
would dial port 443 (its configuration sets the port to uAMQP's
DEFAULT_AMQP_WSS_PORT for WebSockets and ignores a port in the Endpoint);
the custom endpoint's port replaces it. uAMQP's wsio always runs over TLS
(wss) and asks for GET /$servicebus/websocket/ (with a trailing slash) and
the subprotocol AMQPWSB10."""

from azure.servicebus import ServiceBusMessage, TransportType

from harness import BrokerTestCase, body, receive_all, unique_id


class WebSocketTest(BrokerTestCase):
    QUEUES = {"q": {}, "explicit": {}}

    def ws_client(self, **kwargs):
        return self.broker.client(custom_endpoint_address=f"sb://{self.broker.host}:5671", **kwargs)

    def round_trip(self, client, queue):
        # The configuration is private, but it is what uAMQP's set_io picks
        # its transport from: a client that fell back to plain AMQP would
        # pass on this port too.
        self.assertEqual(client._config.transport_type, TransportType.AmqpOverWebsocket)
        self.assertEqual(client._config.connection_port, 5671)
        texts = [f"{queue} over a websocket {i}" for i in range(3)]
        with client.get_queue_sender(queue) as s:
            s.send_messages([ServiceBusMessage(t, message_id=unique_id(queue)) for t in texts])
        with client.get_queue_receiver(queue) as r:
            got = receive_all(r, len(texts))
            self.assertEqual([body(m) for m in got], texts)
            for m in got:
                r.complete_message(m)
            self.assertEqual(r.receive_messages(max_message_count=1, max_wait_time=1), [])
        self.assertNotIn("WebSocket upgrade refused", self.broker.log_tail(1000))

    def test_custom_endpoint(self):
        # custom_endpoint_address alone turns WebSockets on.
        self.round_trip(self.ws_client(), "q")

    def test_transport_type(self):
        self.round_trip(self.ws_client(transport_type=TransportType.AmqpOverWebsocket), "explicit")

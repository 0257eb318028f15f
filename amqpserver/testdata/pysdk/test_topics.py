"""Topics through the Python SDK: a send to a topic reaches each
subscription, each completes on its own, a subscription's dead-letter
queue, and a subscription whose rule (from Config.json) filters and
changes what it gets."""

import json

from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue

from harness import Broker, BrokerTestCase, body, receive_all, unique_id

TOPIC = {
    "DefaultMessageTimeToLive": "PT1H",
    "DuplicateDetectionHistoryTimeWindow": "PT20S",
    "RequiresDuplicateDetection": False,
}

# The emulator's defaults for a subscription.
SUBSCRIPTION = {
    "DeadLetteringOnMessageExpiration": False,
    "DefaultMessageTimeToLive": "PT1H",
    "LockDuration": "PT1M",
    "MaxDeliveryCount": 3,
    "ForwardDeadLetteredMessagesTo": "",
    "ForwardTo": "",
    "RequiresSession": False,
}


def topic(name, subscriptions):
    """A topic of the Config.json; subscriptions maps each name to its
    rules (None: none listed, so it gets $Default)."""
    subs = []
    for sub, rules in subscriptions.items():
        entry = {"Name": sub, "Properties": SUBSCRIPTION}
        if rules is not None:
            entry["Rules"] = rules
        subs.append(entry)
    return {"Name": name, "Properties": TOPIC, "Subscriptions": subs}


CONFIG = {
    "UserConfig": {
        "Namespaces": [
            {
                "Name": "sbemulatorns",
                "Queues": [],
                "Topics": [
                    topic("fanout", {"s1": None, "s2": None}),
                    topic("deadletter", {"d1": None, "d2": None}),
                    topic("filtered", {
                        "red": [{
                            "Name": "redRule",
                            "Properties": {
                                "FilterType": "Sql",
                                "SqlFilter": {"SqlExpression": "color = 'red'"},
                                "Action": {"SqlExpression": "SET sys.label = 'urgent'; SET checked = TRUE"},
                            },
                        }],
                        "blue": [{
                            "Name": "blueRule",
                            "Properties": {
                                "FilterType": "Correlation",
                                "CorrelationFilter": {"Properties": {"color": "blue"}},
                            },
                        }],
                    }),
                ],
            }
        ],
        "Logging": {"Type": "File"},
    }
}


class TopicsTest(BrokerTestCase):
    @classmethod
    def setUpClass(cls):
        # The harness writes queues only: this class's broker has topics.
        cls.broker = Broker({})
        with open(cls.broker.config, "w") as f:
            json.dump(CONFIG, f, indent=2)
        try:
            cls.broker.start()
        except Exception:
            cls.broker.close()
            raise
        cls.sb = cls.broker.client()

    def test_each_subscription_gets_every_message(self):
        ids = [unique_id("fan") for _ in range(3)]
        with self.sb.get_topic_sender("fanout") as s:
            s.send_messages([ServiceBusMessage(f"m{i}", message_id=id_, application_properties={"n": i})
                             for i, id_ in enumerate(ids)])
        for sub in ("s1", "s2"):
            with self.sb.get_subscription_receiver("fanout", sub, max_wait_time=5) as r:
                got = receive_all(r, 3)
                self.assertEqual([m.message_id for m in got], ids, sub)
                self.assertEqual([body(m) for m in got], ["m0", "m1", "m2"])
                self.assertEqual([m.application_properties[b"n"] for m in got], [0, 1, 2])
                for m in got:
                    r.complete_message(m)
                self.assertEqual(r.receive_messages(max_wait_time=1), [], f"{sub} is empty")

    def test_subscription_dead_letter_queue(self):
        id_ = unique_id("dead")
        with self.sb.get_topic_sender("deadletter") as s:
            s.send_messages(ServiceBusMessage("poison", message_id=id_))
        with self.sb.get_subscription_receiver("deadletter", "d1", max_wait_time=5) as r:
            [m] = receive_all(r, 1)
            self.assertEqual(m.message_id, id_)
            r.dead_letter_message(m, reason="bad order", error_description="no such product")
            self.assertEqual(r.peek_messages(10), [], "gone from the subscription")
        with self.sb.get_subscription_receiver("deadletter", "d1", sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                                               max_wait_time=5) as dlq:
            [d] = receive_all(dlq, 1)
            self.assertEqual(d.message_id, id_)
            self.assertEqual(body(d), "poison")
            self.assertEqual(d.dead_letter_reason, "bad order")
            self.assertEqual(d.dead_letter_error_description, "no such product")
            dlq.complete_message(d)
            self.assertEqual(dlq.receive_messages(max_wait_time=1), [], "the dead-letter queue is empty")
        # The other subscription's copy was not touched.
        with self.sb.get_subscription_receiver("deadletter", "d2", max_wait_time=5) as r:
            [m] = receive_all(r, 1)
            self.assertEqual(m.message_id, id_)
            self.assertEqual(m.dead_letter_reason, None)
            r.complete_message(m)

    def test_rules_from_config_filter_and_change_messages(self):
        orders = [(unique_id(color), color) for color in ("red", "green", "blue")]
        with self.sb.get_topic_sender("filtered") as s:
            s.send_messages([ServiceBusMessage(id_, message_id=id_, subject=color,
                                               application_properties={"color": color})
                             for id_, color in orders])
        with self.sb.get_subscription_receiver("filtered", "red", max_wait_time=3) as r:
            got = receive_all(r, 3, window=2)
            self.assertEqual([m.message_id for m in got], [orders[0][0]], "only the red order")
            [m] = got
            self.assertEqual(m.subject, "urgent", "the action set sys.label")
            self.assertEqual(m.application_properties[b"checked"], True)
            self.assertEqual(m.application_properties[b"RuleName"], b"redRule")
            r.complete_message(m)
        with self.sb.get_subscription_receiver("filtered", "blue", max_wait_time=3) as r:
            got = receive_all(r, 3, window=2)
            self.assertEqual([m.message_id for m in got], [orders[2][0]], "only the blue order")
            self.assertEqual(got[0].subject, "blue", "a rule without an action changes nothing")
            self.assertEqual(got[0].application_properties, {b"color": b"blue"})
            r.complete_message(got[0])

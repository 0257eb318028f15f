"""The administration API (ATOM over HTTP) through the Python SDK's
ServiceBusAdministrationClient: queues created, read, updated, listed past
100 and deleted, runtime counts of what the SDK sent, a topic with a
subscription and rules, and the errors.

That client always speaks https:// to the connection string's host and
port ("https://" + the Endpoint's netloc, management/_management_client.py,
__init__). The messaging connection string names no port (uAMQP takes
5671), which would mean 443 here, so the administration client's names the
amqps port, 5671, where walbus serves HTTPS beside AMQP with the same
certificate. It trusts the broker's authority through REQUESTS_CA_BUNDLE
(requests reads it when the transport's verify is True): the client builds
its RequestsTransport without the keyword arguments it is given
(_build_pipeline), so connection_verify would reach it only per call.
"""

import os
from datetime import datetime, timedelta, timezone

import requests
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)

from harness import KEY, BrokerTestCase, body, receive_all

COUNTS = ("active_message_count", "dead_letter_message_count", "scheduled_message_count", "total_message_count")


def counts(rt, names=COUNTS):
    return {n: getattr(rt, n) for n in names}


def with_types(values):
    """values with each value's type, as 5 == 5.0 == True-ish comparisons
    would hide a property read back as another type."""
    return {k: (type(v).__name__, v) for k, v in values.items()}


class AdminTest(BrokerTestCase):
    # sender has no Manage right: the administration API must refuse it.
    EXTRA_ARGS = ("--key", "sender=c2VuZGVy:Send,Listen")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.saved_bundle = os.environ.get("REQUESTS_CA_BUNDLE")
        os.environ["REQUESTS_CA_BUNDLE"] = cls.broker.ca
        cls.admin = cls.admin_client()

    @classmethod
    def tearDownClass(cls):
        cls.admin.close()
        if cls.saved_bundle is None:
            os.environ.pop("REQUESTS_CA_BUNDLE", None)
        else:
            os.environ["REQUESTS_CA_BUNDLE"] = cls.saved_bundle
        super().tearDownClass()

    @classmethod
    def admin_client(cls, key_name="RootManageSharedAccessKey", key=KEY):
        """An administration client for the broker's amqps port. Errors the
        client retries (none here) are retried once, quickly."""
        cs = (f"Endpoint=sb://{cls.broker.host}:5671/;"
              f"SharedAccessKeyName={key_name};SharedAccessKey={key}")
        return ServiceBusAdministrationClient.from_connection_string(
            cs, retry_total=1, retry_backoff_factor=0.2, retry_backoff_max=1)

    def assertStatus(self, cm, status):
        self.assertEqual(cm.exception.status_code, status, str(cm.exception))

    def test_it_is_tls_with_the_brokers_authority(self):
        # Per call, the system's authorities instead of the broker's: the
        # certificate is refused. (A new client: a pooled connection would
        # not be verified again.)
        with self.admin_client() as fresh, self.assertRaises(ServiceRequestError):
            fresh.get_namespace_properties(connection_verify=requests.utils.DEFAULT_CA_BUNDLE_PATH, retry_total=0)
        ns = self.admin.get_namespace_properties()
        self.assertEqual(ns.messaging_sku, "Standard")
        self.assertTrue(ns.name)

    def test_queue_created_with_settings_reads_back_and_updates(self):
        settings = {
            "lock_duration": timedelta(seconds=45),
            "max_delivery_count": 7,
            "max_size_in_megabytes": 2048,
            "requires_session": False,
            "requires_duplicate_detection": True,
            "duplicate_detection_history_time_window": timedelta(minutes=5),
            "default_message_time_to_live": timedelta(hours=1),
            "dead_lettering_on_message_expiration": True,
            "user_metadata": "it's \"the\" orders & <more>",
        }
        created = self.admin.create_queue("orders", **settings)
        self.assertEqual(created.name, "orders")
        self.assertEqual({k: getattr(created, k) for k in settings}, settings, "the created queue")
        got = self.admin.get_queue("orders")
        self.assertEqual(got.name, "orders")
        self.assertEqual({k: getattr(got, k) for k in settings}, settings, "the queue read back")
        self.assertEqual(got.status, "Active")

        got.max_delivery_count = 9
        got.lock_duration = "PT2M"
        got.user_metadata = "changed"
        self.admin.update_queue(got)
        again = self.admin.get_queue("orders")
        self.assertEqual((again.max_delivery_count, again.lock_duration, again.user_metadata),
                         (9, timedelta(minutes=2), "changed"))
        # Keyword arguments update too.
        self.admin.update_queue(again, max_delivery_count=3)
        self.assertEqual(self.admin.get_queue("orders").max_delivery_count, 3)

        with self.assertRaises(HttpResponseError) as cm:
            self.admin.update_queue(again, requires_session=True)
        self.assertStatus(cm, 400)
        again.name = "never-created"
        with self.assertRaises(ResourceNotFoundError):
            self.admin.update_queue(again)
        with self.assertRaises(HttpResponseError) as cm:
            self.admin.create_queue("bad", lock_duration=timedelta(minutes=10))
        self.assertStatus(cm, 400)
        self.assertIn("LockDuration", str(cm.exception))

        sessions = self.admin.create_queue("sessions", requires_session=True)
        self.assertTrue(sessions.requires_session)
        self.assertTrue(self.admin.get_queue("sessions").requires_session)

    def test_runtime_properties_count_what_the_sdk_sent(self):
        self.admin.create_queue("counted")
        self.assertEqual(counts(self.admin.get_queue_runtime_properties("counted")), dict.fromkeys(COUNTS, 0))
        with self.sb.get_queue_sender("counted") as s:
            s.send_messages([ServiceBusMessage(b) for b in ("a", "b", "c")])
            s.schedule_messages(ServiceBusMessage("later"), datetime.now(timezone.utc) + timedelta(hours=1))
        with self.sb.get_queue_receiver("counted", max_wait_time=5) as r:
            [first] = receive_all(r, 1)
            self.assertEqual(body(first), "a")
            r.dead_letter_message(first, reason="test")

        rt = self.admin.get_queue_runtime_properties("counted")
        self.assertEqual(rt.name, "counted")
        self.assertEqual(counts(rt), {"active_message_count": 2, "dead_letter_message_count": 1,
                                      "scheduled_message_count": 1, "total_message_count": 4})
        self.assertGreater(rt.size_in_bytes, 0)
        for at in (rt.created_at_utc, rt.updated_at_utc, rt.accessed_at_utc):
            self.assertIsInstance(at, datetime)
        [listed] = [q for q in self.admin.list_queues_runtime_properties() if q.name == "counted"]
        self.assertEqual(counts(listed), counts(rt), "the listed counts")

    def test_list_queues_pages_past_100(self):
        want = [f"page-{i:03d}" for i in range(105)]
        for name in want:
            self.admin.create_queue(name)
        # Every queue, once: the other tests' too.
        names = [q.name for q in self.admin.list_queues()]
        self.assertEqual(len(set(names)), len(names), "no queue listed twice")
        self.assertEqual(sorted(n for n in names if n.startswith("page-")), want)
        self.assertGreater(len(names), 100)

        pages = [[q.name for q in page] for page in self.admin.list_queues(max_page_size=30).by_page()]
        self.assertTrue(all(len(p) <= 30 for p in pages), [len(p) for p in pages])
        self.assertGreaterEqual(len(pages), -(-len(names) // 30))
        self.assertEqual([n for p in pages for n in p], names)

    def test_delete_then_not_found_and_a_second_create_exists(self):
        self.admin.create_queue("deleted")
        with self.assertRaises(ResourceExistsError):
            self.admin.create_queue("deleted")
        self.admin.delete_queue("deleted")
        with self.assertRaises(ResourceNotFoundError):
            self.admin.get_queue("deleted")
        with self.assertRaises(ResourceNotFoundError):
            self.admin.get_queue_runtime_properties("deleted")
        with self.assertRaises(ResourceNotFoundError):
            self.admin.delete_queue("deleted")
        self.assertNotIn("deleted", [q.name for q in self.admin.list_queues()])
        self.assertEqual(self.admin.create_queue("deleted").name, "deleted", "the name is free again")

    def test_topic_subscription_and_rules(self):
        admin = self.admin
        topic = admin.create_topic("news", default_message_time_to_live=timedelta(days=1),
                                   max_size_in_megabytes=2048, user_metadata="news")
        self.assertEqual((topic.name, topic.default_message_time_to_live, topic.max_size_in_megabytes),
                         ("news", timedelta(days=1), 2048))
        self.assertEqual(admin.get_topic("news").user_metadata, "news")
        with self.assertRaises(ResourceExistsError):
            admin.create_topic("news")
        self.assertIn("news", [t.name for t in admin.list_topics()])
        topic.user_metadata = "more news"
        admin.update_topic(topic)
        self.assertEqual(admin.get_topic("news").user_metadata, "more news")

        sub = admin.create_subscription("news", "red", max_delivery_count=4, lock_duration=timedelta(seconds=30))
        self.assertEqual((sub.name, sub.max_delivery_count, sub.lock_duration), ("red", 4, timedelta(seconds=30)))
        admin.create_subscription("news", "all")
        with self.assertRaises(ResourceExistsError):
            admin.create_subscription("news", "all")
        with self.assertRaises(ResourceNotFoundError):
            admin.create_subscription("nonews", "x")
        got = admin.get_subscription("news", "red")
        self.assertEqual((got.max_delivery_count, got.status), (4, "Active"))
        self.assertEqual(sorted(s.name for s in admin.list_subscriptions("news")), ["all", "red"])
        admin.update_subscription("news", got, max_delivery_count=6)
        self.assertEqual(admin.get_subscription("news", "red").max_delivery_count, 6)

        # A new subscription has $Default (1=1); red's is replaced by rules.
        [default] = list(admin.list_rules("news", "all"))
        self.assertEqual(default.name, "$Default")
        self.assertIsInstance(default.filter, SqlRuleFilter)
        self.assertEqual(default.filter.sql_expression, "1=1")
        admin.delete_rule("news", "red", "$Default")

        admin.create_rule("news", "red", "isRed", filter=SqlRuleFilter("color = 'red'"),
                          action=SqlRuleAction("SET tagged = 'yes'"))
        admin.create_rule("news", "red", "expensive",
                          filter=SqlRuleFilter("amount > @min", parameters={"@min": 100}),
                          action=SqlRuleAction("SET level = @level", parameters={"@level": "high"}))
        typed = {"kind": "big", "n": 5, "big": 2 ** 40, "ratio": 1.5, "vip": True,
                 "at": datetime(2000, 1, 1, tzinfo=timezone.utc), "wait": timedelta(minutes=5)}
        admin.create_rule("news", "red", "typed",
                          filter=CorrelationRuleFilter(correlation_id="cid", label="big", properties=typed))
        admin.create_rule("news", "red", "vip",
                          filter=CorrelationRuleFilter(label="vip", properties={"kind": "big", "vip": True}))
        with self.assertRaises(ResourceExistsError):
            admin.create_rule("news", "red", "vip", filter=CorrelationRuleFilter(label="x"))
        with self.assertRaises(HttpResponseError) as cm:
            admin.create_rule("news", "red", "broken", filter=SqlRuleFilter("color = "))
        self.assertStatus(cm, 400)

        red = admin.get_rule("news", "red", "isRed")
        self.assertEqual((red.filter.sql_expression, red.action.sql_expression), ("color = 'red'", "SET tagged = 'yes'"))
        expensive = admin.get_rule("news", "red", "expensive")
        self.assertEqual((expensive.filter.sql_expression, with_types(expensive.filter.parameters)),
                         ("amount > @min", with_types({"@min": 100})))
        self.assertEqual((expensive.action.sql_expression, expensive.action.parameters),
                         ("SET level = @level", {"@level": "high"}))
        got_typed = admin.get_rule("news", "red", "typed")
        self.assertIsInstance(got_typed.filter, CorrelationRuleFilter)
        self.assertEqual((got_typed.filter.correlation_id, got_typed.filter.label), ("cid", "big"))
        self.assertEqual(with_types(got_typed.filter.properties), with_types(typed), "typed properties read back")
        self.assertEqual([r.name for r in admin.list_rules("news", "red")], ["expensive", "isRed", "typed", "vip"])

        # What the rules route: each message matches at most one of red's.
        with self.sb.get_topic_sender("news") as s:
            s.send_messages([
                ServiceBusMessage("r", application_properties={"color": "red"}),
                ServiceBusMessage("b", application_properties={"color": "blue"}),
                ServiceBusMessage("v", subject="vip", application_properties={"kind": "big", "vip": True}),
                ServiceBusMessage("w", subject="vip", application_properties={"kind": "big", "vip": False}),
                ServiceBusMessage("e", application_properties={"amount": 500}),
            ])
        rt = admin.get_subscription_runtime_properties("news", "red")
        self.assertEqual((rt.active_message_count, rt.total_message_count), (3, 3), "red holds r, v and e")
        self.assertEqual(admin.get_subscription_runtime_properties("news", "all").active_message_count, 5)
        self.assertEqual(admin.get_topic_runtime_properties("news").subscription_count, 2)
        with self.sb.get_subscription_receiver("news", "red", max_wait_time=3,
                                               receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = {body(m): m.application_properties or {} for m in receive_all(r, 4, window=2)}
        self.assertEqual(sorted(got), ["e", "r", "v"])
        self.assertEqual(got["r"].get(b"tagged"), b"yes", "isRed's action")
        self.assertEqual(got["e"].get(b"level"), b"high", "expensive's action")
        self.assertNotIn(b"tagged", got["v"])

        # A rule updated, one deleted; the subscription and the topic.
        got_typed.filter = CorrelationRuleFilter(label="huge", properties={"kind": "huge"})
        admin.update_rule("news", "red", got_typed)
        updated = admin.get_rule("news", "red", "typed")
        self.assertEqual((updated.filter.label, updated.filter.properties), ("huge", {"kind": "huge"}))
        admin.delete_rule("news", "red", "isRed")
        with self.assertRaises(ResourceNotFoundError):
            admin.get_rule("news", "red", "isRed")
        with self.assertRaises(ResourceNotFoundError):
            admin.delete_rule("news", "red", "isRed")
        admin.delete_subscription("news", "all")
        with self.assertRaises(ResourceNotFoundError):
            admin.get_subscription("news", "all")
        self.assertEqual([s.name for s in admin.list_subscriptions("news")], ["red"])
        admin.delete_topic("news")
        with self.assertRaises(ResourceNotFoundError):
            admin.get_topic("news")
        with self.assertRaises(ResourceNotFoundError):
            admin.get_subscription("news", "red")

    def test_a_key_without_manage_or_a_wrong_key_is_401(self):
        self.admin.create_queue("guarded")
        for name, key in (("sender", "c2VuZGVy"), ("RootManageSharedAccessKey", "wrong")):
            with self.admin_client(name, key) as admin:
                for call in (lambda: admin.create_queue("refused"), lambda: admin.get_queue("guarded"),
                             lambda: list(admin.list_queues()), lambda: admin.delete_queue("guarded")):
                    with self.assertRaises(HttpResponseError) as cm:
                        call()
                    self.assertStatus(cm, 401)
        # As Service Bus does, a queue that does not exist reads as missing
        # to a valid key without Manage rights.
        with self.admin_client("sender", "c2VuZGVy") as admin:
            with self.assertRaises(ResourceNotFoundError):
                admin.get_queue("absent")
        with self.assertRaises(ResourceNotFoundError):
            self.admin.get_queue("refused")

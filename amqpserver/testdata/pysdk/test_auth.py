"""The Python SDK's ways to authenticate: a named key credential, a SAS
token credential, and a SAS token in the connection string, each through
$cbs put-token with the token forms the SDK makes."""

import base64
import hashlib
import hmac
import time
import urllib.parse

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import ServiceBusAuthenticationError

from harness import KEY, BrokerTestCase, body, receive_all


def sas_token(uri, name, key, ttl=3600):
    """A Service Bus SAS token for uri, signed with key."""
    expiry = str(int(time.time()) + ttl)
    resource = urllib.parse.quote_plus(uri)
    sig = base64.b64encode(hmac.new(key.encode(), f"{resource}\n{expiry}".encode(), hashlib.sha256).digest())
    return f"SharedAccessSignature sr={resource}&sig={urllib.parse.quote_plus(sig)}&se={expiry}&skn={name}"


class AuthTest(BrokerTestCase):
    QUEUES = {"q": {}}

    def send_with(self, client, text):
        with client, client.get_queue_sender("q") as s:
            s.send_messages(ServiceBusMessage(text))

    def test_credentials(self):
        host, ca = self.broker.host, self.broker.ca
        self.send_with(ServiceBusClient(host, AzureNamedKeyCredential("RootManageSharedAccessKey", KEY),
                                        connection_verify=ca, retry_total=0), "named key")
        namespace_token = sas_token(f"sb://{host}/", "RootManageSharedAccessKey", KEY)
        self.send_with(ServiceBusClient(host, AzureSasCredential(namespace_token), connection_verify=ca, retry_total=0),
                       "namespace token")
        queue_token = sas_token(f"sb://{host}/q", "RootManageSharedAccessKey", KEY)
        self.send_with(ServiceBusClient.from_connection_string(
            f"Endpoint=sb://{host}/;SharedAccessSignature={queue_token}", connection_verify=ca, retry_total=0),
            "token in the connection string")
        with self.sb.get_queue_receiver("q", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = receive_all(r, 3)
        self.assertEqual([body(m) for m in got], ["named key", "namespace token", "token in the connection string"])

    def test_bad_tokens(self):
        host, ca = self.broker.host, self.broker.ca
        for name, token in [
            ("expired", sas_token(f"sb://{host}/q", "RootManageSharedAccessKey", KEY, ttl=-60)),
            ("wrong key", sas_token(f"sb://{host}/q", "RootManageSharedAccessKey", "not-the-key")),
            ("another queue", sas_token(f"sb://{host}/other", "RootManageSharedAccessKey", KEY)),
        ]:
            with self.subTest(name):
                with self.assertRaises(ServiceBusAuthenticationError):
                    self.send_with(ServiceBusClient(host, AzureSasCredential(token), connection_verify=ca, retry_total=0), name)

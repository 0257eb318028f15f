"""Test harness: a real `walbus serve` per test class, configured with the
Azure Service Bus emulator's Config.json, for the Python SDK
(azure-servicebus 7.8 on uAMQP, Debian's python3-azure and python3-uamqp).

That SDK connects over TLS to port 5671 and nothing else (a custom port
means WebSockets), so each broker listens on its own loopback address,
127.0.0.N:5671, with a certificate from `walbus cert` for that address.

WALBUS_BIN names the broker binary (make test sets it); without it the
harness uses bin/walbus at the repository root. WALBUS_KEEP=1 keeps each
broker's data directory and log after the run.
"""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from azure.servicebus import ServiceBusClient

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "SAS_KEY_VALUE"

# The emulator's defaults for a queue; tests override what they need.
DEFAULT_QUEUE = {
    "LockDuration": "PT1M",
    "MaxDeliveryCount": 3,
    "RequiresSession": False,
    "RequiresDuplicateDetection": False,
    "DuplicateDetectionHistoryTimeWindow": "PT20S",
    "DefaultMessageTimeToLive": "PT1H",
    "DeadLetteringOnMessageExpiration": False,
    "ForwardTo": "",
    "ForwardDeadLetteredMessagesTo": "",
}


def emulator_config(queues):
    """A Config.json in the emulator's format: one namespace, the given
    queues ({name: properties to override})."""
    return {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": "sbemulatorns",
                    "Queues": [
                        {"Name": name, "Properties": {**DEFAULT_QUEUE, **props}}
                        for name, props in queues.items()
                    ],
                    "Topics": [],
                }
            ],
            "Logging": {"Type": "File"},
        }
    }


def walbus_binary():
    path = os.environ.get("WALBUS_BIN") or os.path.join(HERE, "..", "..", "..", "bin", "walbus")
    if not os.path.exists(path):
        raise RuntimeError(f"walbus binary {path} not found: build it (make build) or set WALBUS_BIN")
    return path


class Broker:
    """One walbus process, restartable on the same address and data dir."""

    def __init__(self, queues, extra_args=()):
        self.dir = tempfile.mkdtemp(prefix="walbus-pysdk-")
        self.data = os.path.join(self.dir, "data")
        self.config = os.path.join(self.dir, "Config.json")
        self.log_path = os.path.join(self.dir, "walbus.log")
        self.extra_args = list(extra_args)
        self.host = None
        self.proc = None
        self.clients = []
        with open(self.config, "w") as f:
            json.dump(emulator_config(queues), f, indent=2)

    def start(self):
        """Runs walbus and waits for its "listening amqps" log line. The
        first start picks a free loopback address; restarts keep it."""
        hosts = [self.host] if self.host else [f"127.0.0.{n}" for n in random.sample(range(2, 255), 8)]
        for host in hosts:
            if self._start_on(host):
                self.host = host
                return
        raise RuntimeError(f"walbus did not start on any of {hosts}:\n{self.log_tail()}")

    def _start_on(self, host):
        certs = os.path.join(self.dir, "certs")
        if self.host != host:
            shutil.rmtree(certs, ignore_errors=True)
            subprocess.run([walbus_binary(), "cert", "--host", host, "--out", certs],
                           check=True, capture_output=True)
        self.ca = os.path.join(certs, "ca.pem")
        offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        log = open(self.log_path, "ab")
        args = [walbus_binary(), "serve", "--data", self.data, "--config", self.config,
                "--amqp", f"{host}:0", "--amqps", f"{host}:5671",
                "--tls-cert", os.path.join(certs, "server.pem"),
                "--tls-key", os.path.join(certs, "server-key.pem"),
                "--http="] + self.extra_args
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        want = re.compile(rf"msg=listening amqps={re.escape(host)}:5671")
        plain = re.compile(rf"msg=listening amqp=({re.escape(host)}:\d+)")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            logged = self._log_from(offset)
            if want.search(logged) and plain.search(logged):
                # The plain AMQP port, for clients other than the SDK
                # (Qpid Proton in test_transactions.py).
                self.amqp_addr = plain.search(logged).group(1)
                return True
            if self.proc.poll() is not None:
                self.proc = None
                return False  # most likely the address is taken: try another
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"walbus did not report listening on {host}:5671:\n{self.log_tail()}")

    def _log_from(self, offset):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    @property
    def connection_string(self):
        return f"Endpoint=sb://{self.host}/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY}"

    def client(self, connection_string=None, **kwargs):
        """A ServiceBusClient that close() closes. Retries are few and
        short, so an error the SDK retries surfaces as that error."""
        kwargs.setdefault("retry_total", 2)
        kwargs.setdefault("retry_backoff_factor", 0.2)
        kwargs.setdefault("retry_backoff_max", 1)
        c = ServiceBusClient.from_connection_string(
            connection_string or self.connection_string, connection_verify=self.ca, **kwargs)
        self.clients.append(c)
        return c

    def stop(self, sig=signal.SIGTERM):
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self, crash=False):
        """Stops the broker (SIGTERM, or SIGKILL with crash) and starts it
        again on the same address and data directory."""
        self.stop(signal.SIGKILL if crash else signal.SIGTERM)
        self.start()

    def log_tail(self, lines=60):
        return "\n".join(self._log_from(0).splitlines()[-lines:])

    def close(self):
        for c in self.clients:
            try:
                c.close()
            except Exception:  # a client of a stopped broker may fail to close
                pass
        self.clients = []
        self.stop()
        if os.environ.get("WALBUS_KEEP"):
            print(f"walbus data and log kept in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class BrokerTestCase(unittest.TestCase):
    """A test class with one broker for all its tests, with the queues in
    QUEUES; a failing test prints the tail of the broker's log."""

    QUEUES = {}
    EXTRA_ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.broker = Broker(cls.QUEUES, cls.EXTRA_ARGS)
        try:
            cls.broker.start()
        except Exception:
            cls.broker.close()
            raise
        cls.sb = cls.broker.client()

    @classmethod
    def tearDownClass(cls):
        cls.broker.close()

    def run(self, result=None):
        result = result if result is not None else self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        out = super().run(result)
        if len(result.failures) + len(result.errors) > before:
            print(f"\n--- {self.id()}: walbus log (last lines) ---\n{self.broker.log_tail()}\n---")
        return out


_counter = 0


def unique_id(prefix="id"):
    """A fresh message or session id."""
    global _counter
    _counter += 1
    return f"{prefix}-{os.getpid()}-{time.time_ns()}-{_counter}"


def receive_all(receiver, count, window=5, deadline=30):
    """Receives until count messages have arrived or window seconds pass
    without any; it never asserts on time."""
    out = []
    end = time.monotonic() + deadline
    while len(out) < count and time.monotonic() < end:
        got = receiver.receive_messages(max_message_count=count - len(out), max_wait_time=window)
        if not got:
            break
        out.extend(got)
    return out


def body(msg):
    """A received message's body as one str."""
    return b"".join(msg.body).decode()

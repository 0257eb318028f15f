// AMQP over WebSockets through webSocketOptions, with the `ws` package as
// the WebSocket implementation, in both SDK versions here. 7.9.5 and
// 7.10.0-beta.2 share core-amqp 4.4.2, whose ConnectionContextBase.create
// builds the URL wss://<Endpoint host>:<port>/$servicebus/websocket with
// the subprotocol AMQPWSB10, where the port is the connection string
// Endpoint's (443 only when the Endpoint names none). The scheme is wss
// whether UseDevelopmentEmulator is set or not, so this file's broker has a
// certificate (its port tells TLS, AMQP and HTTP apart by their first bytes)
// and the client trusts its authority through webSocketConstructorOptions.
// A broker without a certificate is reached with a WebSocket constructor
// that dials ws:// instead, the last test.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { ServiceBusClient as StableClient } from "@azure/service-bus";
import { ServiceBusClient as BetaClient } from "service-bus-beta";
import WebSocket from "ws";
import { brokerSuite, receiveAll, uniqueId, waitFor } from "./harness.mjs";

const versions = [
  { label: "7.9.5", prefix: "stable", Client: StableClient },
  { label: "7.10.0-beta.2", prefix: "beta", Client: BetaClient },
];
const emulatorModes = [
  { label: "with UseDevelopmentEmulator", suffix: "emu", emulator: true },
  { label: "without UseDevelopmentEmulator", suffix: "cloud", emulator: false },
];

const queues = { plain: {} };
for (const v of versions) for (const m of emulatorModes) queues[`${v.prefix}-${m.suffix}`] = {};
const { broker, test } = brokerSuite(queues, { tls: true });

// recordingWebSocket is a WebSocket class that records each socket the SDK
// makes: the URL and subprotocols it asked for, the subprotocol walbus
// chose, the local port of its TCP connection (to find the connection in
// the walbus log) and the binary messages it received. rewrite changes the
// URL before dialling.
function recordingWebSocket(rewrite = (url) => url) {
  const sockets = [];
  class RecordingWebSocket extends WebSocket {
    constructor(url, protocols, options) {
      const dialled = rewrite(String(url));
      super(dialled, protocols, options);
      const record = { url: String(url), dialled, protocols, localPort: 0, chosen: "", binaryMessages: 0 };
      sockets.push(record);
      this.on("upgrade", (res) => {
        record.localPort = res.socket.localPort;
      });
      this.on("open", () => {
        record.chosen = this.protocol;
      });
      this.on("message", (_data, isBinary) => {
        if (isBinary) record.binaryMessages++;
      });
    }
  }
  return { WebSocketClass: RecordingWebSocket, sockets };
}

function connectionString({ emulator }) {
  return emulator ? broker.connectionString : broker.connectionString.replace(";UseDevelopmentEmulator=true", "");
}

// client makes a ServiceBusClient of the given class over webSocketClass,
// closed with the broker.
function client(Client, cs, webSocketClass, constructorOptions) {
  const c = new Client(cs, {
    webSocketOptions: { webSocket: webSocketClass, webSocketConstructorOptions: constructorOptions },
    retryOptions: { retryDelayInMs: 1_000 },
  });
  broker.clients.push(c);
  return c;
}

// roundTrip sends three messages to queue, receives and completes them, and
// checks that the queue is then empty.
async function roundTrip(c, queue) {
  const bodies = [0, 1, 2].map((i) => `${queue} over a websocket ${i}`);
  const sender = c.createSender(queue);
  await sender.sendMessages(bodies.map((body) => ({ body, messageId: uniqueId(queue) })));
  const receiver = c.createReceiver(queue);
  const got = await receiveAll(receiver, bodies.length);
  assert.deepEqual(got.map((m) => m.body), bodies);
  for (const m of got) await receiver.completeMessage(m);
  assert.equal((await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 })).length, 0, "completed messages are gone");
  await receiver.close();
  await sender.close();
}

// assertServedOverWebSockets checks that every socket was upgraded with
// AMQPWSB10 and carried AMQP, and that walbus logged each one's TCP
// connection as an AMQP connection: the connection it served is the
// websocket, not a second one the SDK opened beside it.
async function assertServedOverWebSockets(sockets, url) {
  assert.ok(sockets.length >= 1, "the SDK made a WebSocket with the class it was given");
  for (const s of sockets) {
    assert.equal(s.url, url);
    assert.deepEqual(s.protocols, ["AMQPWSB10"]);
    assert.equal(s.chosen, "AMQPWSB10", "walbus chose the AMQP subprotocol");
    assert.ok(s.localPort > 0, "the upgrade completed");
    assert.ok(s.binaryMessages > 0, "AMQP came back in binary messages");
    const opened = new RegExp(`connection opened.*peer=127\\.0\\.0\\.1:${s.localPort}\\b`);
    assert.ok(await waitFor(() => opened.test(broker.log())), `walbus logged no AMQP connection from port ${s.localPort}`);
  }
}

for (const v of versions) {
  for (const m of emulatorModes) {
    test(`${v.label} ${m.label} sends, receives and completes over wss://`, async () => {
      const { WebSocketClass, sockets } = recordingWebSocket();
      const c = client(v.Client, connectionString(m), WebSocketClass, { ca: readFileSync(broker.caPath) });
      await roundTrip(c, `${v.prefix}-${m.suffix}`);
      await assertServedOverWebSockets(sockets, `wss://127.0.0.1:${broker.port}/$servicebus/websocket`);
    });
  }
}

test("a WebSocket class that dials ws:// reaches walbus without TLS", async () => {
  const { WebSocketClass, sockets } = recordingWebSocket((url) => url.replace(/^wss:/, "ws:"));
  const c = client(StableClient, broker.connectionString, WebSocketClass, {});
  await roundTrip(c, "plain");
  assert.ok(sockets.every((s) => s.dialled.startsWith("ws://")), "every socket dialled ws://");
  await assertServedOverWebSockets(sockets, `wss://127.0.0.1:${broker.port}/$servicebus/websocket`);
});

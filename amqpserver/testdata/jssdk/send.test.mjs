// Sending: single messages, batches, arrays, and the round trip of every
// message property and application property type the JS SDK can send.

import assert from "node:assert/strict";
import { brokerSuite, receiveAll, uniqueId } from "./harness.mjs";

const { broker, test } = brokerSuite({
  single: {},
  batch: {},
  array: {},
  noid: {},
  props: {},
  appprops: {},
  sessions: { RequiresSession: true },
});

test("a single message is sent and received with its body", async () => {
  const client = broker.client();
  const sender = client.createSender("single");
  await sender.sendMessages({ body: "hello", messageId: "m-single" });
  await sender.sendMessages({ body: { json: [1, 2, 3] } });
  await sender.sendMessages({ body: Buffer.from([0, 1, 2, 255]) });
  const receiver = client.createReceiver("single", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 3);
  assert.equal(got.length, 3);
  assert.equal(got[0].body, "hello");
  assert.equal(got[0].messageId, "m-single");
  assert.deepEqual(got[1].body, { json: [1, 2, 3] });
  assert.ok(Buffer.isBuffer(got[2].body), "binary body comes back as a Buffer");
  assert.deepEqual([...got[2].body], [0, 1, 2, 255]);
});

test("a batch from createMessageBatch enqueues every message in order", async () => {
  const client = broker.client();
  const sender = client.createSender("batch");
  const batch = await sender.createMessageBatch();
  assert.ok(batch.maxSizeInBytes > 0, "the sender link advertises a max message size");
  for (let i = 0; i < 10; i++) {
    assert.equal(batch.tryAddMessage({ body: `b${i}`, messageId: `batch-${i}`, applicationProperties: { i } }), true);
  }
  assert.equal(batch.count, 10);
  await sender.sendMessages(batch);

  // A batch of one still goes as a batch transfer.
  const one = await sender.createMessageBatch();
  assert.equal(one.tryAddMessage({ body: "alone", messageId: "batch-alone" }), true);
  await sender.sendMessages(one);

  const receiver = client.createReceiver("batch");
  const got = await receiveAll(receiver, 11);
  assert.deepEqual(
    got.map((m) => m.messageId),
    [...Array.from({ length: 10 }, (_, i) => `batch-${i}`), "batch-alone"],
  );
  assert.deepEqual(got.slice(0, 10).map((m) => m.body), Array.from({ length: 10 }, (_, i) => `b${i}`));
  assert.deepEqual(got.slice(0, 10).map((m) => m.applicationProperties.i), Array.from({ length: 10 }, (_, i) => i));
  // Each inner message has its own, increasing sequence number.
  for (let i = 1; i < got.length; i++) {
    assert.ok(got[i].sequenceNumber.greaterThan(got[i - 1].sequenceNumber), `sequence numbers increase at ${i}`);
  }
  for (const m of got) await receiver.completeMessage(m);
  assert.equal((await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 })).length, 0);
});

test("an array of messages is sent in one call", async () => {
  const client = broker.client();
  const sender = client.createSender("array");
  const msgs = Array.from({ length: 5 }, (_, i) => ({ body: `a${i}`, messageId: `array-${i}` }));
  await sender.sendMessages(msgs);
  const receiver = client.createReceiver("array", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 5);
  assert.deepEqual(got.map((m) => m.messageId), msgs.map((m) => m.messageId));
  assert.deepEqual(got.map((m) => m.body), msgs.map((m) => m.body));
});

test("the broker assigns a message id when none is given", async () => {
  const client = broker.client();
  const sender = client.createSender("noid");
  await sender.sendMessages({ body: "one" });
  await sender.sendMessages([{ body: "two" }, { body: "three" }]);
  const receiver = client.createReceiver("noid", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 3);
  assert.equal(got.length, 3);
  const ids = got.map((m) => m.messageId);
  for (const id of ids) {
    assert.equal(typeof id, "string");
    assert.ok(id.length > 0, "message id is not empty");
  }
  assert.equal(new Set(ids).size, 3, `ids are distinct: ${ids}`);
});

test("every message property round-trips", async () => {
  const client = broker.client();
  const sender = client.createSender("props");
  const sent = {
    body: "props",
    messageId: "props-id",
    correlationId: "corr-1",
    subject: "the-subject",
    to: "someone",
    replyTo: "reply-queue",
    replyToSessionId: "reply-session",
    contentType: "text/plain",
    timeToLive: 120_000,
    partitionKey: "pk-1",
  };
  await sender.sendMessages(sent);
  const receiver = client.createReceiver("props");
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m, "message received");
  for (const key of Object.keys(sent)) {
    assert.deepEqual(m[key], sent[key], key);
  }
  // ExpiresAtUtc = EnqueuedTimeUtc + TimeToLive.
  assert.equal(m.expiresAtUtc.getTime(), m.enqueuedTimeUtc.getTime() + sent.timeToLive);
  await receiver.completeMessage(m);

  // Numeric and Buffer ids, which the SDK also accepts (rhea sends them as
  // ulong and uuid).
  const uuidBytes = Buffer.from("00112233445566778899aabbccddeeff", "hex");
  await sender.sendMessages({ body: "n", messageId: 12345, correlationId: uuidBytes });
  const [n] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(n, "message received");
  assert.equal(n.messageId, 12345);
  assert.ok(Buffer.isBuffer(n.correlationId), "uuid correlation id comes back as a Buffer");
  assert.equal(n.correlationId.toString("hex"), uuidBytes.toString("hex"));
  await receiver.completeMessage(n);
});

test("application properties of every JS type round-trip", async () => {
  const client = broker.client();
  const sender = client.createSender("appprops");
  const date = new Date("2024-05-06T07:08:09.123Z");
  const applicationProperties = {
    str: "text",
    empty: "",
    unicode: "žluťoučký kůň 🐎",
    uint: 42, // rhea encodes positive integers as uint
    zero: 0,
    negInt: -7, // int
    bigUlong: 2 ** 40, // ulong
    bigLong: -(2 ** 40), // long
    double: 3.25,
    negDouble: -0.5,
    yes: true,
    no: false,
    when: date, // timestamp
    bytes: Buffer.from("binary\u0000data"),
    nothing: null,
  };
  await sender.sendMessages({ body: "ap", applicationProperties });
  await sender.sendMessages({ body: "ap2", applicationProperties });

  // By default the SDK turns timestamps into numbers (milliseconds).
  const receiver = client.createReceiver("appprops", { receiveMode: "receiveAndDelete" });
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m, "message received");
  const ap = m.applicationProperties;
  assert.deepEqual(Object.keys(ap).sort(), Object.keys(applicationProperties).sort());
  for (const key of ["str", "empty", "unicode", "uint", "zero", "negInt", "bigUlong", "bigLong", "double", "negDouble", "yes", "no"]) {
    assert.equal(ap[key], applicationProperties[key], key);
  }
  assert.equal(ap.when, date.getTime(), "timestamp as milliseconds");
  assert.equal(ap.nothing, null);
  await receiver.close();

  // With skipConvertingDate the SDK leaves values as rhea decoded them: the
  // timestamp is a Date and the binary a Buffer (the default conversion walks
  // into Buffers too, turning them into plain objects).
  const raw = client.createReceiver("appprops", { receiveMode: "receiveAndDelete", skipConvertingDate: true });
  const [m2] = await raw.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m2, "second message received");
  const ap2 = m2.applicationProperties;
  assert.ok(ap2.when instanceof Date, "timestamp as Date");
  assert.equal(ap2.when.getTime(), date.getTime());
  assert.ok(Buffer.isBuffer(ap2.bytes), "binary comes back as a Buffer");
  assert.equal(ap2.bytes.toString(), "binary\u0000data");
  assert.equal(ap2.bigLong, applicationProperties.bigLong);
  assert.equal(ap2.nothing, null);
});

test("sessionId round-trips on a session queue", async () => {
  const client = broker.client();
  const sender = client.createSender("sessions");
  const sessionId = uniqueId("s");
  await sender.sendMessages({ body: "in a session", sessionId, replyToSessionId: "rs", messageId: "sess-msg" });
  const receiver = await client.acceptSession("sessions", sessionId);
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m, "message received");
  assert.equal(m.sessionId, sessionId);
  assert.equal(m.replyToSessionId, "rs");
  assert.equal(m.messageId, "sess-msg");
  await receiver.completeMessage(m);
});

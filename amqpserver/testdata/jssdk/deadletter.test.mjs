// The dead-letter subqueue: receive, peek, complete, abandon; and
// MaxDeliveryCountExceeded once a message has been delivered too often;
// a session queue's dead-letter queue takes plain receivers.

import assert from "node:assert/strict";
import { brokerSuite, receiveAll } from "./harness.mjs";

const { broker, test } = brokerSuite({
  dlq: {},
  maxdelivery: { MaxDeliveryCount: 2 },
  dlqfirst: {},
  sessiondlq: { RequiresSession: true, MaxDeliveryCount: 2 },
});

test("the dead-letter subqueue can be peeked, received, abandoned and completed", async () => {
  const client = broker.client();
  await client.createSender("dlq").sendMessages([
    { body: "x1", messageId: "dlq-1" },
    { body: "x2", messageId: "dlq-2" },
  ]);
  const receiver = client.createReceiver("dlq");
  const got = await receiveAll(receiver, 2);
  assert.equal(got.length, 2);
  for (const m of got) await receiver.deadLetterMessage(m, { deadLetterReason: "r", deadLetterErrorDescription: m.messageId });
  assert.deepEqual(await receiver.peekMessages(10), [], "main queue is empty");

  const dlq = client.createReceiver("dlq", { subQueueType: "deadLetter" });
  const peeked = await dlq.peekMessages(10);
  assert.deepEqual(peeked.map((m) => m.messageId), ["dlq-1", "dlq-2"], "peek the DLQ in order");
  assert.deepEqual(peeked.map((m) => m.deadLetterReason), ["r", "r"]);
  assert.deepEqual(peeked.map((m) => m.deadLetterErrorDescription), ["dlq-1", "dlq-2"]);
  for (const m of peeked) assert.equal(m.lockToken, undefined, "peeked messages are not locked");

  const [first] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.equal(first.messageId, "dlq-1");
  assert.ok(first.lockedUntilUtc instanceof Date, "DLQ messages are locked in peekLock");
  await dlq.abandonMessage(first);
  const again = await receiveAll(dlq, 2);
  assert.deepEqual(again.map((m) => m.messageId), ["dlq-1", "dlq-2"], "abandoned DLQ message is back at the head");
  for (const m of again) await dlq.completeMessage(m);
  assert.deepEqual(await dlq.peekMessages(10), [], "DLQ is empty after complete");
  assert.deepEqual(await dlq.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
});

test("a message delivered MaxDeliveryCount times is dead-lettered with MaxDeliveryCountExceeded", async () => {
  const client = broker.client();
  await client.createSender("maxdelivery").sendMessages({ body: "poison", messageId: "poison-1" });
  const receiver = client.createReceiver("maxdelivery");
  for (let i = 0; i < 2; i++) {
    const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
    assert.ok(m, `delivery ${i + 1}`);
    await receiver.abandonMessage(m);
  }
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 1_000 }), [], "no third delivery");
  assert.deepEqual(await receiver.peekMessages(10), [], "gone from the queue");

  const dlq = client.createReceiver("maxdelivery", { subQueueType: "deadLetter" });
  const [d] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(d, "in the dead-letter queue");
  assert.equal(d.messageId, "poison-1");
  assert.equal(d.body, "poison");
  assert.equal(d.deadLetterReason, "MaxDeliveryCountExceeded");
  assert.equal(typeof d.deadLetterErrorDescription, "string");
  await dlq.completeMessage(d);
});

test("the dead-letter subqueue can be received from as the first operation on a new connection", async () => {
  const seed = broker.client();
  await seed.createSender("dlqfirst").sendMessages({ body: "dead", messageId: "dlqfirst-1" });
  const receiver = seed.createReceiver("dlqfirst");
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  await receiver.deadLetterMessage(m, { deadLetterReason: "seeded" });

  // The SDK puts a token for "dlqfirst/$DeadLetterQueue" only.
  const client = broker.client();
  const dlq = client.createReceiver("dlqfirst", { subQueueType: "deadLetter" });
  const [d] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.equal(d?.messageId, "dlqfirst-1");
  await dlq.completeMessage(d);
});

test("a session queue's dead-letter queue is received without sessions", async () => {
  const client = broker.client();
  await client.createSender("sessiondlq").sendMessages([
    { body: "poison", messageId: "sdlq-1", sessionId: "s1" },
    { body: "bad", messageId: "sdlq-2", sessionId: "s1" },
  ]);
  const session = await client.acceptSession("sessiondlq", "s1");
  for (let i = 0; i < 2; i++) {
    const [m] = await session.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
    assert.equal(m?.messageId, "sdlq-1", `delivery ${i + 1}`);
    await session.abandonMessage(m);
  }
  const [bad] = await session.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.equal(bad?.messageId, "sdlq-2", "the poison message is gone after two deliveries");
  await session.deadLetterMessage(bad, { deadLetterReason: "BadInput" });
  await session.close();

  const dlq = client.createReceiver("sessiondlq", { subQueueType: "deadLetter" });
  const got = await receiveAll(dlq, 2);
  assert.deepEqual(got.map((m) => m.messageId), ["sdlq-1", "sdlq-2"]);
  assert.deepEqual(got.map((m) => m.sessionId), ["s1", "s1"]);
  assert.deepEqual(got.map((m) => m.deadLetterReason), ["MaxDeliveryCountExceeded", "BadInput"]);
  for (const m of got) await dlq.completeMessage(m);
  assert.deepEqual(await dlq.peekMessages(10), [], "DLQ is empty after complete");
});

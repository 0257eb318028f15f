// Time to live: expired messages are never received; with
// DeadLetteringOnMessageExpiration they move to the dead-letter queue.

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { brokerSuite, waitFor } from "./harness.mjs";

const { broker, test } = brokerSuite({
  shortdefault: { DefaultMessageTimeToLive: "PT2S" },
  permessage: {},
  expirydlq: { DefaultMessageTimeToLive: "PT2S", DeadLetteringOnMessageExpiration: true },
  lockedexpiry: { DefaultMessageTimeToLive: "PT2S" },
});

test("a message past the queue's default TTL is never received", async () => {
  const client = broker.client();
  await client.createSender("shortdefault").sendMessages({ body: "short", messageId: "ttl-1" });
  await sleep(3_000);
  const receiver = client.createReceiver("shortdefault");
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 1_000 }), [], "expired: not received");
  const rad = client.createReceiver("shortdefault", { receiveMode: "receiveAndDelete" });
  assert.deepEqual(await rad.receiveMessages(1, { maxWaitTimeInMs: 1_000 }), [], "expired: not received in receiveAndDelete");
  // Without dead-lettering on expiry it is dropped, not dead-lettered.
  const dlq = client.createReceiver("shortdefault", { subQueueType: "deadLetter" });
  assert.deepEqual(await dlq.receiveMessages(1, { maxWaitTimeInMs: 500 }), [], "not dead-lettered");
});

test("a per-message timeToLive expires that message only", async () => {
  const client = broker.client();
  await client.createSender("permessage").sendMessages([
    { body: "brief", messageId: "ttl-brief", timeToLive: 1_000 },
    { body: "lasting", messageId: "ttl-lasting" },
  ]);
  await sleep(2_500);
  const receiver = client.createReceiver("permessage");
  const got = await receiver.receiveMessages(10, { maxWaitTimeInMs: 2_000 });
  assert.deepEqual(got.map((m) => m.messageId), ["ttl-lasting"], "only the unexpired message");
  assert.ok(got[0].expiresAtUtc.getTime() > Date.now(), "the received one is not expired");
  await receiver.completeMessage(got[0]);
});

test("with DeadLetteringOnMessageExpiration an expired message moves to the DLQ with TTLExpiredException", async () => {
  const client = broker.client();
  await client.createSender("expirydlq").sendMessages({ body: "old", messageId: "ttl-dlq", applicationProperties: { k: "v" } });
  await sleep(3_000);
  const receiver = client.createReceiver("expirydlq");
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 1_000 }), [], "expired: not received");

  const dlq = client.createReceiver("expirydlq", { subQueueType: "deadLetter" });
  // The broker moves it when it notices the expiry; give it a while.
  const dead = await waitFor(async () => (await dlq.receiveMessages(1, { maxWaitTimeInMs: 1_000 }))[0]);
  assert.ok(dead, "expired message is in the dead-letter queue");
  assert.equal(dead.messageId, "ttl-dlq");
  assert.equal(dead.body, "old");
  assert.equal(dead.deadLetterReason, "TTLExpiredException");
  assert.equal(dead.applicationProperties.k, "v", "application properties kept");
  await dlq.completeMessage(dead);
  assert.deepEqual(await receiver.peekMessages(10), [], "main queue empty");
});

test("a locked message does not expire while it is locked", async () => {
  const client = broker.client();
  await client.createSender("lockedexpiry").sendMessages({ body: "held", messageId: "ttl-held" });
  const receiver = client.createReceiver("lockedexpiry");
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m);
  await sleep(3_000); // past its TTL, within its one-minute lock
  await receiver.completeMessage(m);
  assert.deepEqual(await receiver.peekMessages(10), []);
});

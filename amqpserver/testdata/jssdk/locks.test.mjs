// Message locks: renewMessageLock, the SDK's automatic renewal, and
// MessageLockLost once a lock has expired (queues with a 2 s LockDuration).

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { brokerSuite } from "./harness.mjs";

const shortLock = { LockDuration: "PT2S", MaxDeliveryCount: 10 };
const { broker, test } = brokerSuite({
  renew: shortLock,
  autorenew: shortLock,
  expire: shortLock,
});

const lockLost = (err) => {
  assert.equal(err.code, "MessageLockLost", `${err.code}: ${err.message}`);
  return true;
};

test("renewMessageLock extends the lock beyond LockDuration", async () => {
  const client = broker.client();
  await client.createSender("renew").sendMessages({ body: "keep", messageId: "renew-1" });
  const receiver = client.createReceiver("renew", { maxAutoLockRenewalDurationInMs: 0 });
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m);
  let lockedUntil = m.lockedUntilUtc.getTime();
  // Renew every 500 ms for three lock durations; each renewal moves the lock.
  for (let i = 0; i < 12; i++) {
    await sleep(500);
    const renewed = await receiver.renewMessageLock(m);
    assert.ok(renewed instanceof Date, "renewMessageLock returns the new lockedUntil");
    assert.ok(renewed.getTime() >= lockedUntil, `renewal ${i} does not move the lock backwards`);
    assert.equal(m.lockedUntilUtc.getTime(), renewed.getTime(), "the message's lockedUntilUtc is updated");
    lockedUntil = renewed.getTime();
  }
  assert.ok(lockedUntil > m.enqueuedTimeUtc.getTime() + 2_000, "the lock now ends later than the first one could");
  // The lock is still ours: complete succeeds and the message is gone.
  await receiver.completeMessage(m);
  assert.deepEqual(await receiver.peekMessages(10), []);
});

test("automatic lock renewal keeps a message locked while it is processed", async () => {
  const client = broker.client();
  await client.createSender("autorenew").sendMessages({ body: "slow", messageId: "auto-1" });
  const receiver = client.createReceiver("autorenew", { maxAutoLockRenewalDurationInMs: 60_000 });
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m);
  await sleep(5_000); // over two lock durations
  const other = client.createReceiver("autorenew");
  assert.deepEqual(await other.receiveMessages(1, { maxWaitTimeInMs: 500 }), [], "still locked: not redelivered");
  await receiver.completeMessage(m);
  assert.deepEqual(await receiver.peekMessages(10), []);
});

test("an expired lock gives MessageLockLost on settle and renew, and the message is redelivered", async () => {
  const client = broker.client();
  await client.createSender("expire").sendMessages({ body: "late", messageId: "exp-1" });
  const receiver = client.createReceiver("expire", { maxAutoLockRenewalDurationInMs: 0 });
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m);
  await sleep(3_500); // past the 2 s lock
  await assert.rejects(receiver.completeMessage(m), lockLost, "complete after expiry");
  await assert.rejects(receiver.renewMessageLock(m), lockLost, "renew after expiry");

  // Lock expiry counts as a delivery; the message comes back. A failed
  // settlement settles the delivery on the client side (rhea marks it
  // remotely settled), so each other outcome gets a fresh delivery.
  const settlements = {
    deadLetter: (msg) => receiver.deadLetterMessage(msg, { deadLetterReason: "x" }),
    abandon: (msg) => receiver.abandonMessage(msg),
    defer: (msg) => receiver.deferMessage(msg),
  };
  let expected = 1;
  for (const [name, settle] of Object.entries(settlements)) {
    const [again] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
    assert.ok(again, `redelivered after the lock expired (before ${name})`);
    assert.equal(again.messageId, "exp-1");
    assert.equal(again.deliveryCount, expected, "each expiry counted as a delivery");
    expected++;
    await sleep(3_500);
    await assert.rejects(settle(again), lockLost, `${name} after expiry`);
  }

  const [last] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(last, "still in the queue: the failed settlements changed nothing");
  assert.equal(last.deliveryCount, expected);
  assert.equal(last.state, "active");
  await receiver.completeMessage(last);
  assert.deepEqual(await receiver.peekMessages(10), []);
}, { timeout: 120_000 });

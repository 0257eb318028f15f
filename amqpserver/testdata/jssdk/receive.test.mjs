// Receiving in peekLock and receiveAndDelete, the broker-set properties, and
// settlement: complete, abandon, dead-letter, defer and deferred messages.

import assert from "node:assert/strict";
import { brokerSuite, receiveAll, uniqueId } from "./harness.mjs";

const { broker, test } = brokerSuite({
  peeklock: {},
  rad: {},
  exclusive: {},
  abandon: { MaxDeliveryCount: 5 },
  deadletter: {},
  defer: { MaxDeliveryCount: 5 },
  deferrad: {},
});

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

test("peekLock delivers a locked message with the broker's properties", async () => {
  const client = broker.client();
  const sender = client.createSender("peeklock");
  const before = Date.now();
  await sender.sendMessages({ body: "locked", messageId: "pl-1", timeToLive: 600_000 });
  const receiver = client.createReceiver("peeklock", { receiveMode: "peekLock" });
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  const after = Date.now();
  assert.ok(m, "message received");
  assert.equal(m.body, "locked");

  // sequenceNumber is a Long.
  assert.equal(typeof m.sequenceNumber.toNumber, "function", "sequenceNumber is a Long");
  assert.ok(m.sequenceNumber.greaterThan(0), `sequence number ${m.sequenceNumber} > 0`);

  // The broker's clock, near ours (a sanity bound on a timestamp, not a
  // measurement of how long anything took).
  assert.ok(m.enqueuedTimeUtc instanceof Date);
  assert.ok(m.enqueuedTimeUtc.getTime() >= before - 60_000 && m.enqueuedTimeUtc.getTime() <= after + 60_000,
    `enqueuedTimeUtc ${m.enqueuedTimeUtc.toISOString()} near now`);

  // The lock lasts LockDuration (PT1M) from when the message was taken.
  assert.ok(m.lockedUntilUtc instanceof Date, "lockedUntilUtc is set in peekLock");
  assert.ok(m.lockedUntilUtc.getTime() > m.enqueuedTimeUtc.getTime(), "locked until after enqueue");
  assert.ok(m.lockedUntilUtc.getTime() <= m.enqueuedTimeUtc.getTime() + 60_000 + 60_000,
    `lockedUntilUtc ${m.lockedUntilUtc.toISOString()} about one LockDuration after ${m.enqueuedTimeUtc.toISOString()}`);
  assert.ok(m.lockedUntilUtc.getTime() >= m.enqueuedTimeUtc.getTime() + 30_000,
    `lockedUntilUtc ${m.lockedUntilUtc.toISOString()} is about one minute out`);

  assert.match(m.lockToken, uuidPattern, "lock token is a uuid");
  // JS shows the wire's delivery-count: 0 at the first delivery.
  assert.strictEqual(m.deliveryCount, 0, "deliveryCount at first delivery");
  assert.equal(m.expiresAtUtc.getTime(), m.enqueuedTimeUtc.getTime() + 600_000, "expiresAtUtc = enqueued + ttl");
  assert.equal(m.state, "active");

  await receiver.completeMessage(m);
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), [], "completed message is gone");
  assert.deepEqual(await receiver.peekMessages(10), [], "completed message is not peeked");
});

test("receiveAndDelete removes the message when it is delivered", async () => {
  const client = broker.client();
  const sender = client.createSender("rad");
  await sender.sendMessages([{ body: "r1" }, { body: "r2" }]);
  const receiver = client.createReceiver("rad", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 2);
  assert.deepEqual(got.map((m) => m.body), ["r1", "r2"]);
  for (const m of got) {
    assert.equal(m.lockToken, undefined, "no lock token in receiveAndDelete");
    assert.ok(m.sequenceNumber.greaterThan(0));
    assert.ok(m.enqueuedTimeUtc instanceof Date);
    assert.equal(m.state, "active");
  }
  const other = client.createReceiver("rad");
  assert.deepEqual(await other.receiveMessages(1, { maxWaitTimeInMs: 500 }), [], "nothing left");
  assert.deepEqual(await other.peekMessages(10), [], "nothing to peek");
});

test("a locked message is not delivered to a second receiver", async () => {
  const client = broker.client();
  await client.createSender("exclusive").sendMessages({ body: "mine" });
  const first = client.createReceiver("exclusive");
  const second = client.createReceiver("exclusive");
  const [m] = await first.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m, "first receiver got it");
  assert.deepEqual(await second.receiveMessages(1, { maxWaitTimeInMs: 1_000 }), [], "second receiver gets nothing");
  await first.abandonMessage(m);
  const [again] = await second.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(again, "after abandon the second receiver gets it");
  assert.equal(again.sequenceNumber.toString(), m.sequenceNumber.toString());
  await second.completeMessage(again);
});

test("abandon makes the message available again and counts the delivery", async () => {
  const client = broker.client();
  await client.createSender("abandon").sendMessages({ body: "again", messageId: "ab-1" });
  const receiver = client.createReceiver("abandon");
  const counts = [];
  let last;
  for (let i = 0; i < 3; i++) {
    const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
    assert.ok(m, `delivery ${i}`);
    assert.equal(m.messageId, "ab-1");
    counts.push(m.deliveryCount);
    last = m;
    if (i < 2) await receiver.abandonMessage(m, { abandonedTimes: i + 1, note: "abandoned" });
  }
  assert.deepEqual(counts, [0, 1, 2], "deliveryCount grows by one per abandon");
  // Properties to modify are merged into the application properties.
  assert.equal(last.applicationProperties?.abandonedTimes, 2);
  assert.equal(last.applicationProperties?.note, "abandoned");
  await receiver.completeMessage(last);
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
});

test("deadLetterMessage moves the message to the dead-letter queue with reason, description and properties", async () => {
  const client = broker.client();
  await client.createSender("deadletter").sendMessages({
    body: "bad", messageId: "dl-1", applicationProperties: { original: "yes" },
  });
  const receiver = client.createReceiver("deadletter");
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m);
  await receiver.deadLetterMessage(m, {
    deadLetterReason: "BadInput",
    deadLetterErrorDescription: "the input was bad",
    extra: "added",
    count: 7,
  });
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), [], "gone from the queue");

  const dlq = client.createReceiver("deadletter", { subQueueType: "deadLetter" });
  const [d] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(d, "message in the dead-letter queue");
  assert.equal(d.messageId, "dl-1");
  assert.equal(d.body, "bad");
  assert.equal(d.deadLetterReason, "BadInput");
  assert.equal(d.deadLetterErrorDescription, "the input was bad");
  assert.equal(d.applicationProperties.DeadLetterReason, "BadInput");
  assert.equal(d.applicationProperties.DeadLetterErrorDescription, "the input was bad");
  assert.equal(d.applicationProperties.extra, "added");
  assert.equal(d.applicationProperties.count, 7);
  assert.equal(d.applicationProperties.original, "yes");
  await dlq.completeMessage(d);
  assert.deepEqual(await dlq.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
});

test("a deferred message is only received by sequence number and settled through $management", async () => {
  const client = broker.client();
  const sender = client.createSender("defer");
  await sender.sendMessages([
    { body: "d1", messageId: "defer-1" },
    { body: "d2", messageId: "defer-2" },
    { body: "d3", messageId: "defer-3" },
  ]);
  const receiver = client.createReceiver("defer");
  const got = await receiveAll(receiver, 3);
  assert.equal(got.length, 3);
  for (const m of got) await receiver.deferMessage(m, { deferredBy: "test" });
  const [s1, s2, s3] = got.map((m) => m.sequenceNumber);

  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), [], "deferred messages are not received");

  // Peek shows them as deferred.
  const peeked = await receiver.peekMessages(10);
  assert.deepEqual(peeked.map((m) => m.state), ["deferred", "deferred", "deferred"]);

  // One by one: complete the first.
  const [d1] = await receiver.receiveDeferredMessages(s1);
  assert.ok(d1, "deferred message received by sequence number");
  assert.equal(d1.messageId, "defer-1");
  assert.equal(d1.state, "deferred");
  assert.match(d1.lockToken, uuidPattern);
  assert.ok(d1.lockedUntilUtc instanceof Date, "deferred message is locked");
  assert.equal(d1.applicationProperties.deferredBy, "test", "defer's properties to modify are kept");
  await receiver.completeMessage(d1);

  // Several at once: abandon the second (it stays deferred, its count
  // grows), dead-letter the third.
  const both = await receiver.receiveDeferredMessages([s2, s3]);
  assert.deepEqual(both.map((m) => m.messageId).sort(), ["defer-2", "defer-3"]);
  const d2 = both.find((m) => m.messageId === "defer-2");
  const d3 = both.find((m) => m.messageId === "defer-3");
  const countBefore = d2.deliveryCount ?? 0;
  await receiver.abandonMessage(d2);
  await receiver.deadLetterMessage(d3, { deadLetterReason: "deferred-then-dead", deadLetterErrorDescription: "x" });

  const [d2again] = await receiver.receiveDeferredMessages(s2);
  assert.ok(d2again, "abandoned deferred message is still deferred");
  assert.equal(d2again.state, "deferred");
  assert.equal(d2again.deliveryCount, countBefore + 1, "abandon counted a delivery");
  await receiver.deferMessage(d2again);
  const [d2third] = await receiver.receiveDeferredMessages(s2);
  assert.ok(d2third, "re-deferred message can be received again");
  await receiver.completeMessage(d2third);

  // Completed messages are gone: the SDK reports MessageNotFound.
  await assert.rejects(receiver.receiveDeferredMessages(s1), (err) => {
    assert.equal(err.code, "MessageNotFound", `${err.code}: ${err.message}`);
    return true;
  });

  const dlq = client.createReceiver("defer", { subQueueType: "deadLetter", receiveMode: "receiveAndDelete" });
  const [dead] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(dead, "dead-lettered deferred message is in the DLQ");
  assert.equal(dead.messageId, "defer-3");
  assert.equal(dead.deadLetterReason, "deferred-then-dead");
  assert.deepEqual(await receiver.peekMessages(10), [], "queue is empty");
});

test("receiveDeferredMessages in receiveAndDelete mode removes the message", async () => {
  const client = broker.client();
  await client.createSender("deferrad").sendMessages({ body: "dr", messageId: uniqueId("dr") });
  const locker = client.createReceiver("deferrad");
  const [m] = await locker.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m);
  await locker.deferMessage(m);
  const rad = client.createReceiver("deferrad", { receiveMode: "receiveAndDelete" });
  const [d] = await rad.receiveDeferredMessages(m.sequenceNumber);
  assert.ok(d, "received by sequence number");
  assert.equal(d.messageId, m.messageId);
  assert.equal(d.lockToken, undefined, "no lock in receiveAndDelete");
  assert.deepEqual(await rad.peekMessages(10), [], "removed");
  await assert.rejects(rad.receiveDeferredMessages(m.sequenceNumber), (err) => {
    assert.equal(err.code, "MessageNotFound", `${err.code}: ${err.message}`);
    return true;
  });
});

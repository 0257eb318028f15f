// Scheduled messages: scheduleMessages, cancelScheduledMessages, and
// messages sent with scheduledEnqueueTimeUtc.

import assert from "node:assert/strict";
import { brokerSuite, waitFor } from "./harness.mjs";

const { broker, test } = brokerSuite({
  schedule: {},
  cancel: {},
  sendscheduled: {},
});

test("scheduleMessages returns sequence numbers and the messages appear at their time", async () => {
  const client = broker.client();
  const sender = client.createSender("schedule");
  const at = new Date(Date.now() + 4_000);
  const seqNums = await sender.scheduleMessages(
    [{ body: "later-1", messageId: "sch-1" }, { body: "later-2", messageId: "sch-2" }],
    at,
  );
  assert.equal(seqNums.length, 2);
  for (const s of seqNums) assert.equal(typeof s.toNumber, "function", "sequence numbers are Longs");
  assert.ok(seqNums[1].greaterThan(seqNums[0]), "distinct, increasing sequence numbers");

  const receiver = client.createReceiver("schedule");
  const peeked = await receiver.peekMessages(10);
  assert.deepEqual(peeked.map((m) => m.messageId), ["sch-1", "sch-2"]);
  assert.deepEqual(peeked.map((m) => m.state), ["scheduled", "scheduled"]);
  assert.deepEqual(peeked.map((m) => m.sequenceNumber.toString()), seqNums.map(String));
  for (const m of peeked) {
    assert.equal(m.scheduledEnqueueTimeUtc?.getTime(), at.getTime(), "scheduledEnqueueTimeUtc");
  }

  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), [], "not visible before its time");

  const got = [];
  await waitFor(async () => {
    got.push(...(await receiver.receiveMessages(2 - got.length, { maxWaitTimeInMs: 2_000 })));
    return got.length === 2;
  });
  assert.deepEqual(got.map((m) => m.messageId).sort(), ["sch-1", "sch-2"], "both appeared");
  for (const m of got) {
    assert.equal(m.state, "active");
    assert.equal(m.body, m.messageId === "sch-1" ? "later-1" : "later-2");
    assert.equal(m.scheduledEnqueueTimeUtc?.getTime(), at.getTime());
    assert.ok(m.enqueuedTimeUtc.getTime() >= at.getTime() - 1_000, "enqueued at activation");
    await receiver.completeMessage(m);
  }
});

test("cancelScheduledMessages removes a scheduled message", async () => {
  const client = broker.client();
  const sender = client.createSender("cancel");
  const at = new Date(Date.now() + 2_000);
  const [keep] = await sender.scheduleMessages({ body: "keep", messageId: "cancel-keep" }, at);
  const [drop] = await sender.scheduleMessages({ body: "drop", messageId: "cancel-drop" }, at);
  const [drop2, drop3] = await sender.scheduleMessages(
    [{ body: "drop2", messageId: "cancel-drop2" }, { body: "drop3", messageId: "cancel-drop3" }], at);
  await sender.cancelScheduledMessages(drop);
  await sender.cancelScheduledMessages([drop2, drop3]);

  const receiver = client.createReceiver("cancel");
  const peeked = await receiver.peekMessages(10);
  assert.deepEqual(peeked.map((m) => m.messageId), ["cancel-keep"], "cancelled messages are gone from peek");
  assert.equal(peeked[0].sequenceNumber.toString(), keep.toString());

  const [m] = await waitFor(async () => receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 }).then((r) => (r.length ? r : null)));
  assert.ok(m, "the kept message appeared");
  assert.equal(m.messageId, "cancel-keep");
  await receiver.completeMessage(m);
  assert.deepEqual(await receiver.receiveMessages(5, { maxWaitTimeInMs: 2_000 }), [], "cancelled messages never appear");
});

test("a message sent with scheduledEnqueueTimeUtc is scheduled", async () => {
  const client = broker.client();
  const sender = client.createSender("sendscheduled");
  const at = new Date(Date.now() + 3_000);
  await sender.sendMessages({ body: "via send", messageId: "sendsch-1", scheduledEnqueueTimeUtc: at });
  const batch = await sender.createMessageBatch();
  assert.ok(batch.tryAddMessage({ body: "via batch", messageId: "sendsch-2", scheduledEnqueueTimeUtc: at }));
  await sender.sendMessages(batch);

  const receiver = client.createReceiver("sendscheduled");
  const peeked = await receiver.peekMessages(10);
  assert.deepEqual(peeked.map((m) => m.messageId), ["sendsch-1", "sendsch-2"]);
  assert.deepEqual(peeked.map((m) => m.state), ["scheduled", "scheduled"]);
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), [], "not visible before its time");

  const got = [];
  await waitFor(async () => {
    got.push(...(await receiver.receiveMessages(2 - got.length, { maxWaitTimeInMs: 2_000 })));
    return got.length === 2;
  });
  assert.deepEqual(got.map((m) => m.messageId).sort(), ["sendsch-1", "sendsch-2"]);
  for (const m of got) await receiver.completeMessage(m);
});

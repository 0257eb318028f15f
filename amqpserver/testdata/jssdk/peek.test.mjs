// Browsing with peekMessages: from a sequence number, in order, paging, and
// including locked, deferred and scheduled messages.

import assert from "node:assert/strict";
import { brokerSuite, receiveAll, seqs } from "./harness.mjs";

const { broker, test } = brokerSuite({
  peek: {},
  firstop: {},
  omit: {},
});

test("peekMessages pages in sequence order and includes locked, deferred and scheduled messages", async () => {
  const client = broker.client();
  const sender = client.createSender("peek");
  const ids = Array.from({ length: 8 }, (_, i) => `peek-${i}`);
  await sender.sendMessages(ids.map((id) => ({ body: id, messageId: id })));
  const [scheduledSeq] = await sender.scheduleMessages({ body: "sched", messageId: "peek-scheduled" }, new Date(Date.now() + 3_600_000));

  // Lock peek-0 and peek-1, defer peek-1.
  const receiver = client.createReceiver("peek");
  const locked = await receiveAll(receiver, 2);
  assert.deepEqual(locked.map((m) => m.messageId), ["peek-0", "peek-1"]);
  await receiver.deferMessage(locked[1]);

  // Without fromSequenceNumber the SDK continues after the last peeked (it
  // keeps that number per connection and entity: this connection has not
  // peeked yet).
  const cont = client.createReceiver("peek");
  const p1 = await cont.peekMessages(4);
  const p2 = await cont.peekMessages(4);
  const p3 = await cont.peekMessages(4);
  assert.deepEqual([...p1, ...p2, ...p3].map((m) => m.messageId), [...ids, "peek-scheduled"], "consecutive peeks continue");

  // Page with fromSequenceNumber = last + 1.
  const browser = client.createReceiver("peek");
  const all = [];
  const Long = p1[0].sequenceNumber.constructor; // the SDK's Long class
  let from = Long.fromNumber(1);
  for (let page = 0; page < 20; page++) {
    const got = await browser.peekMessages(3, { fromSequenceNumber: from });
    if (got.length === 0) break;
    assert.ok(got.length <= 3, "at most maxMessageCount per page");
    all.push(...got);
    from = got[got.length - 1].sequenceNumber.add(1);
  }
  assert.deepEqual(all.map((m) => m.messageId), [...ids, "peek-scheduled"], "every message once, in order");
  for (let i = 1; i < all.length; i++) {
    assert.ok(all[i].sequenceNumber.greaterThan(all[i - 1].sequenceNumber), "strictly increasing sequence numbers");
  }
  const state = Object.fromEntries(all.map((m) => [m.messageId, m.state]));
  assert.equal(state["peek-0"], "active", "a locked message is peeked as active");
  assert.equal(state["peek-1"], "deferred");
  assert.equal(state["peek-2"], "active");
  assert.equal(state["peek-scheduled"], "scheduled");
  assert.equal(all.at(-1).sequenceNumber.toString(), scheduledSeq.toString());
  for (const m of all) {
    assert.equal(m.lockToken, undefined, "peek does not lock");
    assert.equal(m.body, m.messageId === "peek-scheduled" ? "sched" : m.messageId);
  }

  // From a sequence number in the middle.
  const middle = all[4].sequenceNumber;
  const fromMiddle = await browser.peekMessages(2, { fromSequenceNumber: middle });
  assert.deepEqual(fromMiddle.map((m) => m.messageId), ["peek-4", "peek-5"]);

  // From a number between two messages (or before the first): the next one.
  const beforeFirst = await browser.peekMessages(1, { fromSequenceNumber: all[0].sequenceNumber.subtract(1) });
  assert.deepEqual(seqs(beforeFirst), seqs(all.slice(0, 1)));
  const gapFrom = all[2].sequenceNumber.add(1);
  const afterGap = await browser.peekMessages(1, { fromSequenceNumber: gapFrom });
  assert.deepEqual(seqs(afterGap), seqs(all.slice(3, 4)), "skips to the next existing sequence number");

  // Past the last one: nothing.
  assert.deepEqual(await browser.peekMessages(5, { fromSequenceNumber: all.at(-1).sequenceNumber.add(1) }), []);

  // Peeking locked nothing: the unlocked messages are all still receivable.
  const rest = await receiveAll(client.createReceiver("peek"), 6);
  assert.deepEqual(rest.map((m) => m.messageId), ids.slice(2));
});

test("peekMessages works as the first operation on a new connection", async () => {
  const seed = broker.client();
  await seed.createSender("firstop").sendMessages({ body: "first", messageId: "firstop-1" });
  // A new client whose first use of the entity is a $management request:
  // the SDK puts a token for "<entity>/$management" only.
  const client = broker.client();
  const receiver = client.createReceiver("firstop");
  const peeked = await receiver.peekMessages(5);
  assert.deepEqual(peeked.map((m) => m.messageId), ["firstop-1"]);
  // The same for the dead-letter subqueue's management node.
  const dlq = broker.client().createReceiver("firstop", { subQueueType: "deadLetter" });
  assert.deepEqual(await dlq.peekMessages(5), []);
});

test("peekMessages with omitMessageBody returns the messages without their bodies", async () => {
  const client = broker.client();
  await client.createSender("omit").sendMessages([
    { body: "a string body", messageId: "omit-1", subject: "s", applicationProperties: { k: 7 } },
    { body: { json: true }, messageId: "omit-2" },
  ]);
  const receiver = client.createReceiver("omit");
  const Long = (await receiver.peekMessages(1))[0].sequenceNumber.constructor;
  // omitMessageBody is an option of the SDK's that its types leave out.
  const bare = await receiver.peekMessages(5, { fromSequenceNumber: Long.fromNumber(1), omitMessageBody: true });
  assert.deepEqual(bare.map((m) => m.messageId), ["omit-1", "omit-2"]);
  for (const m of bare) assert.equal(m.body, undefined, `${m.messageId} has a body`);
  assert.equal(bare[0].subject, "s");
  assert.deepEqual(bare[0].applicationProperties, { k: 7 });
  assert.ok(bare[0].sequenceNumber.lessThan(bare[1].sequenceNumber));
  assert.ok(bare[0].enqueuedTimeUtc instanceof Date);
  // Without it, and with it false, the bodies are there.
  for (const options of [{}, { omitMessageBody: false }]) {
    const full = await receiver.peekMessages(5, { fromSequenceNumber: Long.fromNumber(1), ...options });
    assert.deepEqual(full.map((m) => m.body), ["a string body", { json: true }]);
  }
  // The messages themselves keep their bodies.
  const got = await receiveAll(receiver, 2);
  assert.deepEqual(got.map((m) => m.body), ["a string body", { json: true }]);
});

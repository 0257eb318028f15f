// Auto-forwarding: ForwardTo sends messages on to another queue, and
// ForwardDeadLetteredMessagesTo moves dead-lettered messages there with
// their reason and their dead-letter source.

import assert from "node:assert/strict";
import { brokerSuite, receiveAll, waitFor } from "./harness.mjs";

// The sources are listed before their targets on purpose: walbus creates
// targets first whatever the file's order.
const { broker, test } = brokerSuite({
  inbox: { ForwardTo: "outbox" },
  outbox: {},
  orders: { ForwardDeadLetteredMessagesTo: "parked" },
  parked: {},
});

test("a message sent to a ForwardTo queue is received from its target", async () => {
  const client = broker.client();
  await client.createSender("inbox").sendMessages([
    { body: "one", messageId: "fwd-1", applicationProperties: { n: 1 } },
    { body: "two", messageId: "fwd-2", applicationProperties: { n: 2 } },
  ]);
  const outbox = client.createReceiver("outbox");
  const got = await receiveAll(outbox, 2);
  assert.deepEqual(got.map((m) => m.messageId), ["fwd-1", "fwd-2"]);
  assert.deepEqual(got.map((m) => m.applicationProperties.n), [1, 2]);
  for (const m of got) await outbox.completeMessage(m);
  assert.deepEqual(await client.createReceiver("inbox").peekMessages(10), [], "nothing stays in the forwarding queue");
});

test("a dead-lettered message moves to ForwardDeadLetteredMessagesTo with its reason and source", async () => {
  const client = broker.client();
  await client.createSender("orders").sendMessages({ body: "bad", messageId: "order-1" });
  const receiver = client.createReceiver("orders");
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  await receiver.deadLetterMessage(m, { deadLetterReason: "invalid", deadLetterErrorDescription: "no customer" });

  const parked = client.createReceiver("parked");
  const [p] = await parked.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(p, "arrived in the target");
  assert.equal(p.messageId, "order-1");
  assert.equal(p.body, "bad");
  assert.equal(p.deadLetterReason, "invalid");
  assert.equal(p.deadLetterErrorDescription, "no customer");
  assert.equal(p.deadLetterSource, "orders");
  await parked.completeMessage(p);

  // The source completes the message just after the target has it. A new
  // connection per look: the SDK remembers where the last peek stopped.
  const empty = await waitFor(async () => {
    const look = broker.client();
    const left = await look.createReceiver("orders", { subQueueType: "deadLetter" }).peekMessages(10);
    await look.close();
    return left.length === 0;
  });
  assert.ok(empty, "the source's dead-letter queue is empty");
});

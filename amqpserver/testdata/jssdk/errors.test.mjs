// Errors the SDK must classify: a missing entity, an oversize message. And a
// large message that fits, which crosses many frames both ways.

import assert from "node:assert/strict";
import { brokerSuite } from "./harness.mjs";

const { broker, test } = brokerSuite({
  exists: {},
  oversize: {},
  large: {},
});

const code = (want) => (err) => {
  assert.equal(err.code, want, `${err.code}: ${err.message}`);
  return true;
};

test("a missing queue gives MessagingEntityNotFound", async () => {
  const client = broker.client();
  await assert.rejects(client.createSender("no-such-queue").sendMessages({ body: "x" }), code("MessagingEntityNotFound"), "send");
  await assert.rejects(
    client.createReceiver("no-such-queue").receiveMessages(1, { maxWaitTimeInMs: 2_000 }),
    code("MessagingEntityNotFound"),
    "receive",
  );
  await assert.rejects(client.createReceiver("no-such-queue").peekMessages(1), code("MessagingEntityNotFound"), "peek");
  await assert.rejects(client.acceptSession("no-such-queue", "s"), code("MessagingEntityNotFound"), "acceptSession");
  // The connection is still good for entities that exist.
  await client.createSender("exists").sendMessages({ body: "still fine", messageId: "after-missing" });
  const [m] = await client.createReceiver("exists", { receiveMode: "receiveAndDelete" }).receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.equal(m?.messageId, "after-missing");
});

test("an oversize message fails with MessageSizeExceeded and is not stored", async () => {
  // A 10 s operation timeout and no retries: if the broker never settles the
  // transfer, the send fails with the SDK's ServiceTimeout in 10 s rather
  // than after four one-minute attempts.
  const client = broker.client({ retryOptions: { timeoutInMs: 10_000, maxRetries: 0 } });
  const sender = client.createSender("oversize");
  await sender.sendMessages({ body: "warm up", messageId: "before-big" });
  const big = { body: Buffer.alloc(1_100_000, 7), messageId: "too-big" };

  // One message goes to the broker as is: the broker refuses it.
  await assert.rejects(sender.sendMessages(big), code("MessageSizeExceeded"), "single message");
  // Arrays and batches are checked by the SDK against the link's max-message-size.
  await assert.rejects(sender.sendMessages([big]), code("MessageSizeExceeded"), "array");
  const batch = await sender.createMessageBatch();
  assert.ok(batch.maxSizeInBytes < 1_100_000, `link max message size ${batch.maxSizeInBytes} is below the message`);
  assert.equal(batch.tryAddMessage(big), false, "tryAddMessage refuses it");

  // The sender still works, and the big message was not stored.
  await sender.sendMessages({ body: "small", messageId: "small-after-big" });
  const receiver = client.createReceiver("oversize", { receiveMode: "receiveAndDelete" });
  const got = await receiver.receiveMessages(10, { maxWaitTimeInMs: 3_000 });
  assert.deepEqual(got.map((m) => m.messageId), ["before-big", "small-after-big"]);
});

test("a large message under the limit round-trips across many frames", async () => {
  const client = broker.client();
  const sender = client.createSender("large");
  const body = Buffer.alloc(900_000);
  for (let i = 0; i < body.length; i++) body[i] = (i * 31) & 0xff;
  await sender.sendMessages({ body, messageId: "large" });
  const batch = await sender.createMessageBatch();
  assert.ok(batch.tryAddMessage({ body: body.subarray(0, 400_000), messageId: "large-in-batch" }));
  await sender.sendMessages(batch);
  const receiver = client.createReceiver("large");
  const got = [];
  while (got.length < 2) {
    const page = await receiver.receiveMessages(2 - got.length, { maxWaitTimeInMs: 10_000 });
    if (page.length === 0) break;
    got.push(...page);
  }
  assert.deepEqual(got.map((m) => m.messageId), ["large", "large-in-batch"]);
  assert.ok(got[0].body.equals(body), "900 kB body intact");
  assert.ok(got[1].body.equals(body.subarray(0, 400_000)), "400 kB batched body intact");
  for (const m of got) await receiver.completeMessage(m);
});

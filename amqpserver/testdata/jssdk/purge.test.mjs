// Batch delete: deleteMessages and purgeMessages, which @azure/service-bus
// has from 7.10.0-beta.2 (installed beside 7.9.5 as "service-bus-beta").
// They send $management batch-delete-messages; a purge repeats it, 500 at
// a time, until a call deletes fewer.

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import Long from "long";
import { ServiceBusClient } from "service-bus-beta";
import { brokerSuite, receiveAll } from "./harness.mjs";

const { broker, test } = brokerSuite({
  delete: {},
  purge: {},
  sessiondelete: { RequiresSession: true },
  dlqpurge: { MaxDeliveryCount: 1 },
});

function betaClient() {
  const c = new ServiceBusClient(broker.connectionString, { retryOptions: { retryDelayInMs: 1_000 } });
  broker.clients.push(c);
  return c;
}

// peekIds lists the ids of every message in the receiver's queue, peeking
// from the first sequence number (without one, a peek continues after the
// last message this connection peeked).
async function peekIds(receiver) {
  const got = await receiver.peekMessages(100, { fromSequenceNumber: Long.fromNumber(1) });
  return got.map((m) => m.messageId);
}

test("deleteMessages takes the oldest before the cut-off in any state but locked; purgeMessages the rest", async () => {
  const client = betaClient();
  const sender = client.createSender("delete");
  await sender.sendMessages(["del-0", "del-1", "del-2"].map((id) => ({ body: id, messageId: id })));
  await sender.scheduleMessages({ body: "s", messageId: "del-scheduled" }, new Date(Date.now() + 3_600_000));
  const receiver = client.createReceiver("delete");
  const [locked, deferred] = await receiveAll(receiver, 2);
  assert.deepEqual([locked.messageId, deferred.messageId], ["del-0", "del-1"]);
  await receiver.deferMessage(deferred);
  const cutoff = new Date();
  await sleep(20);
  await sender.sendMessages({ body: "late", messageId: "del-late" });

  assert.equal(await receiver.deleteMessages({ maxMessageCount: 2, beforeEnqueueTime: cutoff }), 2, "the deferred del-1 and del-2");
  assert.equal(await receiver.deleteMessages({ maxMessageCount: 10, beforeEnqueueTime: cutoff }), 1, "the scheduled message");
  assert.equal(await receiver.deleteMessages({ maxMessageCount: 10, beforeEnqueueTime: cutoff }), 0, "nothing left before the cut-off");
  const browser = client.createReceiver("delete");
  assert.deepEqual(await peekIds(browser), ["del-0", "del-late"]);
  await assert.rejects(receiver.receiveDeferredMessages(deferred.sequenceNumber), (err) => err.code === "MessageNotFound");

  assert.equal(await receiver.purgeMessages(), 1, "the late message");
  await receiver.completeMessage(locked); // its lock survived every delete
  assert.deepEqual(await peekIds(browser), []);
});

test("purgeMessages empties a queue of more than one batch", async () => {
  const client = betaClient();
  const sender = client.createSender("purge");
  const total = 1_203;
  for (let i = 0; i < total; i += 200) {
    const batch = await sender.createMessageBatch();
    for (let j = i; j < Math.min(i + 200, total); j++) {
      assert.ok(batch.tryAddMessage({ body: `purge-${j}` }));
    }
    await sender.sendMessages(batch);
  }
  const receiver = client.createReceiver("purge");
  assert.equal(await receiver.purgeMessages(), total, "500 + 500 + 203");
  assert.equal(await receiver.purgeMessages(), 0);
  assert.deepEqual(await peekIds(receiver), []);
});

test("a session receiver's deleteMessages takes its own session's messages only", async () => {
  const client = betaClient();
  const sender = client.createSender("sessiondelete");
  await sender.sendMessages([
    { body: "a", messageId: "sd-a", sessionId: "sd-1" },
    { body: "b", messageId: "sd-b", sessionId: "sd-1" },
    { body: "c", messageId: "sd-c", sessionId: "sd-2" },
  ]);
  const session = await client.acceptSession("sessiondelete", "sd-1");
  assert.equal(await session.deleteMessages({ maxMessageCount: 10 }), 2);
  assert.deepEqual(await peekIds(client.createReceiver("sessiondelete")), ["sd-c"]);
  // A plain receiver of the queue names no session: it takes them all.
  assert.equal(await client.createReceiver("sessiondelete").purgeMessages(), 1);
  await session.close();
});

test("purgeMessages on the dead-letter queue empties it and leaves the queue", async () => {
  const client = betaClient();
  const sender = client.createSender("dlqpurge");
  await sender.sendMessages([{ body: "x", messageId: "dp-poison" }, { body: "y", messageId: "dp-fine" }]);
  const receiver = client.createReceiver("dlqpurge");
  const [poison] = await receiveAll(receiver, 1);
  await receiver.deadLetterMessage(poison, { deadLetterReason: "bad" });
  const dlq = client.createReceiver("dlqpurge", { subQueueType: "deadLetter" });
  assert.equal(await dlq.purgeMessages(), 1);
  assert.deepEqual(await peekIds(dlq), []);
  assert.deepEqual(await peekIds(client.createReceiver("dlqpurge")), ["dp-fine"]);
});

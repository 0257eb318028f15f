// Duplicate detection: within DuplicateDetectionHistoryTimeWindow a second
// message with the same messageId is accepted and dropped.

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { brokerSuite, receiveAll } from "./harness.mjs";

const dedup = { RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: "PT20S" };
const { broker, test } = brokerSuite({
  dedup,
  dedupbatch: dedup,
  dedupwindow: dedup,
  nodedup: {},
});

test("a second send of the same messageId is accepted and dropped", async () => {
  const client = broker.client();
  const sender = client.createSender("dedup");
  await sender.sendMessages({ body: "first", messageId: "dup-1" });
  await sender.sendMessages({ body: "second", messageId: "dup-1" }); // accepted: no error
  await sender.sendMessages({ body: "other", messageId: "dup-2" });
  const receiver = client.createReceiver("dedup");
  const got = await receiveAll(receiver, 3, { windowMs: 2_000 });
  assert.deepEqual(got.map((m) => [m.messageId, m.body]), [["dup-1", "first"], ["dup-2", "other"]]);
  for (const m of got) await receiver.completeMessage(m);

  // Still a duplicate after the first copy was consumed.
  await sender.sendMessages({ body: "third", messageId: "dup-1" });
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 1_000 }), [], "dropped after consumption too");
});

test("duplicates inside and across batches and arrays are dropped", async () => {
  const client = broker.client();
  const sender = client.createSender("dedupbatch");
  const batch = await sender.createMessageBatch();
  for (const [id, body] of [["b-1", "one"], ["b-2", "two"], ["b-1", "one again"]]) {
    assert.ok(batch.tryAddMessage({ body, messageId: id }));
  }
  await sender.sendMessages(batch);
  await sender.sendMessages([{ body: "two again", messageId: "b-2" }, { body: "three", messageId: "b-3" }]);
  const receiver = client.createReceiver("dedupbatch", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 5, { windowMs: 2_000 });
  assert.deepEqual(got.map((m) => [m.messageId, m.body]), [["b-1", "one"], ["b-2", "two"], ["b-3", "three"]]);
});

test("after the detection window the same messageId is accepted again", async () => {
  const client = broker.client();
  const sender = client.createSender("dedupwindow");
  await sender.sendMessages({ body: "early", messageId: "w-1" });
  await sleep(21_000); // past the 20 s window
  await sender.sendMessages({ body: "late", messageId: "w-1" });
  const receiver = client.createReceiver("dedupwindow", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 2, { windowMs: 2_000 });
  assert.deepEqual(got.map((m) => m.body), ["early", "late"]);
}, { timeout: 90_000 });

test("without duplicate detection the same messageId is stored twice", async () => {
  const client = broker.client();
  const sender = client.createSender("nodedup");
  await sender.sendMessages({ body: "a", messageId: "same" });
  await sender.sendMessages({ body: "b", messageId: "same" });
  const receiver = client.createReceiver("nodedup", { receiveMode: "receiveAndDelete" });
  const got = await receiveAll(receiver, 2, { windowMs: 2_000 });
  assert.deepEqual(got.map((m) => m.body), ["a", "b"]);
});

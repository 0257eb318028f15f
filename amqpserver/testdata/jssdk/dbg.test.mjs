// Recovery: walbus restarts (SIGTERM, and a SIGKILL crash) under a connected
// JS client; the client reconnects by itself and nothing acknowledged
// before the restart is lost.

import assert from "node:assert/strict";
import { brokerSuite, receiveAll, uniqueId, waitFor } from "./harness.mjs";

// A short lock, so a message locked when the broker stopped comes back soon
// even if its lock survived the restart.
const { broker, test } = brokerSuite({
  restart: { LockDuration: "PT5S" },
  crash: { LockDuration: "PT5S" },
  durable: {},
  durablesessions: { RequiresSession: true },
});

// receiveUntil receives (and completes) until every wanted body has arrived,
// tolerating errors while the client reconnects.
async function receiveUntil(receiver, wanted, { deadlineMs = 60_000 } = {}) {
  const got = [];
  const errors = [];
  await waitFor(async () => {
    try {
      const page = await receiver.receiveMessages(50, { maxWaitTimeInMs: 2_000 });
      for (const m of page) {
        got.push(m);
        await receiver.completeMessage(m);
      }
    } catch (err) {
      errors.push(err);
    }
    return wanted.every((w) => got.some((m) => m.body === w));
  }, { deadlineMs, everyMs: 100 });
  return { got, errors };
}

for (const mode of []) {
  test(`a connected client recovers after a ${mode === "crash" ? "SIGKILL crash" : "SIGTERM restart"} and loses nothing acknowledged`, async () => {
    const queue = mode;
    const client = broker.client();
    const sender = client.createSender(queue);
    const receiver = client.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 0 });

    // Before: 30 sent (each send acknowledged), 10 received and completed,
    // 1 received and left locked.
    const before = Array.from({ length: 30 }, (_, i) => `${mode}-before-${i}`);
    for (let i = 0; i < before.length; i += 10) {
      await sender.sendMessages(before.slice(i, i + 10).map((body) => ({ body, messageId: body })));
    }
    const first = await receiveAll(receiver, 11);
    assert.equal(first.length, 11);
    for (const m of first.slice(0, 10)) await receiver.completeMessage(m);
    const completed = new Set(first.slice(0, 10).map((m) => m.body));

    await broker.restart({ crash: mode === "crash" });

    // After: the same sender and receiver objects work again.
    const after = [`${mode}-after-0`, `${mode}-after-1`];
    await waitFor(async () => {
      try {
        await sender.sendMessages(after.map((body) => ({ body, messageId: body })));
        return true;
      } catch {
        return false;
      }
    }, { deadlineMs: 60_000 });

    const remaining = before.filter((b) => !completed.has(b));
    const { got } = await receiveUntil(receiver, [...remaining, ...after]);
    const bodies = got.map((m) => m.body);
    for (const b of [...remaining, ...after]) assert.ok(bodies.includes(b), `${b} received after the restart`);
    for (const b of completed) assert.ok(!bodies.includes(b), `${b} was completed before the restart: not redelivered`);
    // Only the message that was locked (not settled) may come twice: never
    // anything else.
    const twice = bodies.filter((b, i) => bodies.indexOf(b) !== i);
    assert.deepEqual(twice, [], "no duplicates");
    assert.deepEqual(await receiver.peekMessages(50), [], "queue drained");
  }, { timeout: 180_000 });
}

test("deferred, scheduled and dead-lettered messages and session state survive a restart", async () => {
  const client = broker.client();
  const sender = client.createSender("durable");
  await sender.sendMessages([
    { body: "to-defer", messageId: "to-defer" },
    { body: "to-dlq", messageId: "to-dlq" },
  ]);
  const receiver = client.createReceiver("durable");
  const [toDefer, toDlq] = await receiveAll(receiver, 2);
  await receiver.deferMessage(toDefer);
  await receiver.deadLetterMessage(toDlq, { deadLetterReason: "kept", deadLetterErrorDescription: "across restart" });
  const at = new Date(Date.now() + 8_000);
  const [scheduledSeq] = await sender.scheduleMessages({ body: "scheduled", messageId: "scheduled" }, at);

  const sid = uniqueId("durable");
  const sessionSender = client.createSender("durablesessions");
  await sessionSender.sendMessages({ body: "in-session", sessionId: sid });
  const session = await client.acceptSession("durablesessions", sid);
  await session.setSessionState({ checkpoint: 42 });
  await session.close();

  await broker.restart();

  // The deferred message, by its sequence number.
  const deferred = await waitFor(async () => {
    try {
      return (await receiver.receiveDeferredMessages(toDefer.sequenceNumber))[0];
    } catch (e) {
      console.log("DBG", e.code, e.message);
      return undefined;
    }
  }, { deadlineMs: 60_000 });
  assert.ok(deferred, "deferred message still there");
  assert.equal(deferred.messageId, "to-defer");
  await receiver.completeMessage(deferred);

  // The dead-lettered one.
  const dlq = client.createReceiver("durable", { subQueueType: "deadLetter" });
  const [dead] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(dead, "dead-lettered message still there");
  assert.equal(dead.messageId, "to-dlq");
  assert.equal(dead.deadLetterReason, "kept");
  await dlq.completeMessage(dead);

  // The scheduled one is still scheduled, then appears.
  const peeked = await receiver.peekMessages(10);
  const sched = peeked.find((m) => m.messageId === "scheduled");
  assert.ok(sched, "scheduled message still there");
  assert.equal(sched.sequenceNumber.toString(), scheduledSeq.toString());
  const { got } = await receiveUntil(receiver, ["scheduled"]);
  assert.ok(got.some((m) => m.messageId === "scheduled"), "scheduled message appeared after the restart");

  // Session state and the session's message.
  const again = await client.acceptSession("durablesessions", sid);
  assert.deepEqual(await again.getSessionState(), { checkpoint: 42 });
  const [m] = await again.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.equal(m?.body, "in-session");
  await again.completeMessage(m);
}, { timeout: 180_000 });

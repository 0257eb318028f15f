// The receive loop the JS SDK depends on: receiveMessages drains the link's
// credit after every call (and closes the link if the drain is not answered
// within 200 ms), and subscribe() adds credit one message at a time.

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { brokerSuite, waitFor } from "./harness.mjs";

const { broker, test } = brokerSuite({
  drainrad: {},
  drainlock: {},
  subscribe: {},
});

// receiverLink is the rhea-promise link under a receiver's receiveMessages.
// SDK internals (pinned @azure/service-bus 7.9.5): the only way to see that
// the SDK kept its link, since a re-attach happens on the same connection.
const receiverLink = (receiver) => receiver._batchingReceiver?.link;

for (const receiveMode of ["receiveAndDelete", "peekLock"]) {
  test(`consecutive receiveMessages calls drain the link and keep it open (${receiveMode})`, async () => {
    const queue = receiveMode === "peekLock" ? "drainlock" : "drainrad";
    const connectionsBefore = broker.connectionsOpened();
    const client = broker.client();
    const sender = client.createSender(queue);
    const receiver = client.createReceiver(queue, { receiveMode });

    // First call: creates the link.
    await sender.sendMessages([{ body: 0 }, { body: 1 }, { body: 2 }]);
    const received = [];
    received.push(...(await receiver.receiveMessages(10, { maxWaitTimeInMs: 5_000 })));
    assert.equal(received.length, 3, "first call got the three messages");
    if (receiveMode === "peekLock") for (const m of received) await receiver.completeMessage(m);
    const link = receiverLink(receiver);
    assert.ok(link, "the receiver has a link");
    let drained = 0;
    link.on("receiver_drained", () => drained++);

    let next = 3;
    for (let round = 0; round < 10; round++) {
      const drainedBefore = drained;
      if (round % 2 === 0) {
        // Messages sent while the link has no credit wait for the next call.
        const batch = [next, next + 1];
        next += 2;
        await sender.sendMessages(batch.map((body) => ({ body })));
        const got = [];
        while (got.length < batch.length) {
          const page = await receiver.receiveMessages(10, { maxWaitTimeInMs: 5_000 });
          if (page.length === 0) break;
          got.push(...page);
        }
        received.push(...got);
        if (receiveMode === "peekLock") for (const m of got) await receiver.completeMessage(m);
      } else {
        // An empty call: the drain is answered with no messages.
        assert.deepEqual(await receiver.receiveMessages(5, { maxWaitTimeInMs: 300 }), [], `round ${round}: nothing to receive`);
      }
      assert.ok(drained > drainedBefore, `round ${round}: the broker answered the drain`);
      assert.strictEqual(receiverLink(receiver), link, `round ${round}: the SDK kept the same link`);
      assert.ok(link.isOpen(), `round ${round}: the link is open`);
      assert.equal(link.credit, 0, `round ${round}: no credit left after the drain`);
    }
    assert.deepEqual(received.map((m) => m.body), Array.from({ length: next }, (_, i) => i), "every message once, in order");
    assert.equal(broker.connectionsOpened() - connectionsBefore, 1, "one connection: no reconnect");
    await client.close();
  });
}

test("subscribe processes a steady stream of 200 messages exactly once", async () => {
  const connectionsBefore = broker.connectionsOpened();
  const client = broker.client();
  const sender = client.createSender("subscribe");
  const receiver = client.createReceiver("subscribe");
  const seen = new Map();
  const errors = [];
  const subscription = receiver.subscribe(
    {
      async processMessage(m) {
        seen.set(m.body, (seen.get(m.body) ?? 0) + 1);
      },
      async processError(args) {
        errors.push(args.error);
      },
    },
    { maxConcurrentCalls: 4 },
  );

  // Send while it runs: 40 sends of 5, with pauses.
  const total = 200;
  for (let i = 0; i < total; i += 5) {
    await sender.sendMessages(Array.from({ length: 5 }, (_, k) => ({ body: i + k, messageId: `sub-${i + k}` })));
    await sleep(20);
  }
  await waitFor(() => seen.size === total, { deadlineMs: 60_000 });
  // Anything delivered twice would show up in the next moments.
  await sleep(1_000);
  await subscription.close();

  assert.deepEqual(errors, [], "no errors reported to processError");
  assert.equal(seen.size, total, "every message processed");
  const duplicates = [...seen].filter(([, n]) => n !== 1);
  assert.deepEqual(duplicates, [], "each message processed exactly once");
  // Completed automatically after processMessage.
  const left = await waitFor(async () => (await receiver.peekMessages(10)).length === 0, { deadlineMs: 10_000 });
  assert.ok(left, "all messages were completed");
  assert.equal(broker.connectionsOpened() - connectionsBefore, 1, "one connection: no reconnect");
  await client.close();
}, { timeout: 120_000 });

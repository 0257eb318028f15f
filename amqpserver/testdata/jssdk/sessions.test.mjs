// Sessions: acceptSession, acceptNextSession, locked sessions, FIFO order,
// session lock renewal, session state, and non-session receivers refused.

import assert from "node:assert/strict";
import { brokerSuite, receiveAll, uniqueId } from "./harness.mjs";

const sessionQueue = { RequiresSession: true };
const { broker, test } = brokerSuite({
  named: sessionQueue,
  empty: sessionQueue,
  next: sessionQueue,
  nonefree: sessionQueue,
  locked: sessionQueue,
  fifo: sessionQueue,
  renew: sessionQueue,
  state: sessionQueue,
  nosession: sessionQueue,
});

test("acceptSession receives only that session's messages", async () => {
  const client = broker.client();
  const sender = client.createSender("named");
  const a = uniqueId("a");
  const b = uniqueId("b");
  await sender.sendMessages([
    { body: "a1", sessionId: a },
    { body: "b1", sessionId: b },
    { body: "a2", sessionId: a },
    { body: "b2", sessionId: b },
    { body: "a3", sessionId: a },
  ]);
  const receiver = await client.acceptSession("named", a);
  assert.equal(receiver.sessionId, a);
  assert.ok(receiver.sessionLockedUntilUtc instanceof Date, "sessionLockedUntilUtc is set");
  assert.ok(receiver.sessionLockedUntilUtc.getTime() > Date.now() - 60_000, "session lock is current");
  const got = await receiveAll(receiver, 3);
  assert.deepEqual(got.map((m) => m.body), ["a1", "a2", "a3"]);
  for (const m of got) {
    assert.equal(m.sessionId, a);
    await receiver.completeMessage(m);
  }
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), [], "nothing of the other session");
  await receiver.close();

  const rb = await client.acceptSession("named", b);
  const gotB = await receiveAll(rb, 2);
  assert.deepEqual(gotB.map((m) => m.body), ["b1", "b2"]);
  for (const m of gotB) await rb.completeMessage(m);
});

test("an empty named session can be accepted", async () => {
  const client = broker.client();
  const sessionId = uniqueId("empty");
  const receiver = await client.acceptSession("empty", sessionId);
  assert.equal(receiver.sessionId, sessionId);
  assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
  // A message sent to it now arrives on the open receiver.
  await client.createSender("empty").sendMessages({ body: "late", sessionId });
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m, "message sent after the accept");
  assert.equal(m.body, "late");
  await receiver.completeMessage(m);
});

test("acceptNextSession takes sessions with messages, one at a time", async () => {
  const client = broker.client();
  const sender = client.createSender("next");
  const s1 = uniqueId("n1");
  const s2 = uniqueId("n2");
  await sender.sendMessages([
    { body: "x", sessionId: s1 },
    { body: "y", sessionId: s2 },
    { body: "x2", sessionId: s1 },
  ]);
  const first = await client.acceptNextSession("next");
  const second = await client.acceptNextSession("next");
  assert.deepEqual([first.sessionId, second.sessionId].sort(), [s1, s2].sort(), "two different sessions");
  for (const r of [first, second]) {
    const want = r.sessionId === s1 ? ["x", "x2"] : ["y"];
    const got = await receiveAll(r, want.length);
    assert.deepEqual(got.map((m) => m.body), want);
    for (const m of got) {
      assert.equal(m.sessionId, r.sessionId);
      await r.completeMessage(m);
    }
  }
});

test("acceptNextSession with no free session fails with ServiceTimeout", async () => {
  const client = broker.client({ retryOptions: { timeoutInMs: 3_000, maxRetries: 0 } });
  const sid = uniqueId("busy");
  await client.createSender("nonefree").sendMessages({ body: "held", sessionId: sid });
  const holder = await client.acceptSession("nonefree", sid); // the only session, locked
  await assert.rejects(client.acceptNextSession("nonefree"), (err) => {
    assert.equal(err.code, "ServiceTimeout", `${err.code}: ${err.message}`);
    // The broker's com.microsoft:timeout, not the client giving up (which
    // the SDK also reports as ServiceTimeout, with this message).
    assert.doesNotMatch(err.message, /within allocated time/);
    return true;
  });
  // The broker is fine afterwards: the held session still works.
  const [m] = await holder.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m);
  await holder.completeMessage(m);
  await holder.close();
  // And with a session free again, acceptNextSession works on this client.
  await client.createSender("nonefree").sendMessages({ body: "free", sessionId: sid });
  const next = await client.acceptNextSession("nonefree");
  assert.equal(next.sessionId, sid);
});

test("a session locked by another receiver cannot be accepted", async () => {
  const owner = broker.client();
  const sid = uniqueId("lk");
  await owner.createSender("locked").sendMessages({ body: "mine", sessionId: sid });
  const holder = await owner.acceptSession("locked", sid);
  const other = broker.client();
  await assert.rejects(other.acceptSession("locked", sid), (err) => {
    assert.equal(err.code, "SessionCannotBeLocked", `${err.code}: ${err.message}`);
    return true;
  });
  // Also refused on the owner's own connection.
  await assert.rejects(owner.acceptSession("locked", sid), (err) => {
    assert.equal(err.code, "SessionCannotBeLocked", `${err.code}: ${err.message}`);
    return true;
  });
  // Once released it can be accepted.
  await holder.close();
  const taken = await other.acceptSession("locked", sid);
  const [m] = await taken.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.ok(m, "message of the released session");
  assert.equal(m.body, "mine");
  await taken.completeMessage(m);
});

test("messages of a session arrive in FIFO order, across abandon", async () => {
  const client = broker.client();
  const sender = client.createSender("fifo");
  const sid = uniqueId("f");
  const noise = uniqueId("noise");
  const batch = await sender.createMessageBatch();
  for (let i = 0; i < 30; i++) {
    assert.ok(batch.tryAddMessage({ body: i, sessionId: sid }));
    if (i % 3 === 0) assert.ok(batch.tryAddMessage({ body: -i, sessionId: noise }));
  }
  await sender.sendMessages(batch);
  const receiver = await client.acceptSession("fifo", sid);
  const got = [];
  // Abandon the head once: it must come back first.
  const [head] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.equal(head.body, 0);
  await receiver.abandonMessage(head);
  while (got.length < 30) {
    const page = await receiver.receiveMessages(7, { maxWaitTimeInMs: 5_000 });
    if (page.length === 0) break;
    for (const m of page) {
      got.push(m.body);
      await receiver.completeMessage(m);
    }
  }
  assert.deepEqual(got, Array.from({ length: 30 }, (_, i) => i));
});

test("renewSessionLock extends the session lock", async () => {
  const client = broker.client();
  const sid = uniqueId("r");
  await client.createSender("renew").sendMessages({ body: "r", sessionId: sid });
  const receiver = await client.acceptSession("renew", sid, { maxAutoLockRenewalDurationInMs: 0 });
  const before = receiver.sessionLockedUntilUtc.getTime();
  await new Promise((resolve) => setTimeout(resolve, 1_100));
  const renewed = await receiver.renewSessionLock();
  assert.ok(renewed instanceof Date, "renewSessionLock returns a Date");
  assert.ok(renewed.getTime() > before, `renewed lock ${renewed.toISOString()} is later than ${new Date(before).toISOString()}`);
  assert.equal(receiver.sessionLockedUntilUtc.getTime(), renewed.getTime(), "receiver's sessionLockedUntilUtc updated");
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  await receiver.completeMessage(m);
});

test("getSessionState and setSessionState store the session's state", async () => {
  const client = broker.client();
  const sid = uniqueId("st");
  const receiver = await client.acceptSession("state", sid);
  assert.equal(await receiver.getSessionState(), null, "no state at first");
  await receiver.setSessionState({ step: 1, items: ["a"] });
  assert.deepEqual(await receiver.getSessionState(), { step: 1, items: ["a"] });
  const raw = Buffer.from([0xde, 0xad, 0xbe, 0xef]);
  await receiver.setSessionState(raw);
  const got = await receiver.getSessionState();
  assert.ok(Buffer.isBuffer(got), "binary state comes back as a Buffer");
  assert.equal(got.toString("hex"), "deadbeef");
  await receiver.setSessionState("kept");
  await receiver.close();

  // The state outlives the receiver.
  const again = await broker.client().acceptSession("state", sid);
  assert.equal(await again.getSessionState(), "kept");
  // Other sessions have their own state.
  const other = await client.acceptSession("state", uniqueId("st-other"));
  assert.equal(await other.getSessionState(), null);
});

test("a non-session receiver on a session queue is refused", async () => {
  const client = broker.client();
  await client.createSender("nosession").sendMessages({ body: "s", sessionId: uniqueId("ns") });
  const receiver = client.createReceiver("nosession");
  await assert.rejects(receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 }), (err) => {
    assert.match(err.message, /session/i, `${err.code}: ${err.message}`);
    return true;
  });
});

// The administration API (ATOM over HTTP) through the JS SDK's
// ServiceBusAdministrationClient, in its two versions here:
// - 7.10.0-beta.2 ("service-bus-beta") speaks plain http:// to the
//   Endpoint's host:port when the connection string has
//   UseDevelopmentEmulator=true;
// - 7.9.5 always speaks https://, so this file's broker has a certificate
//   (its port tells TLS, AMQP and HTTP apart by their first bytes) and the
//   client trusts its authority through core-rest-pipeline's tlsOptions.
// Every test runs once per client, on entities named after it; messages
// are sent with the same version's ServiceBusClient over AMQP.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  ServiceBusAdministrationClient as StableAdmin,
  ServiceBusClient as StableClient,
} from "@azure/service-bus";
import {
  ServiceBusAdministrationClient as BetaAdmin,
  ServiceBusClient as BetaClient,
} from "service-bus-beta";
import { brokerSuite, receiveAll } from "./harness.mjs";

// sender has no Manage right: the administration API must refuse it.
const { broker, test } = brokerSuite({}, { tls: true, args: ["--key", "sender=c2VuZGVy:Send,Listen"] });

// connectionString names another key than the emulator's.
function connectionString(keyName, key) {
  return broker.connectionString
    .replace("RootManageSharedAccessKey", keyName)
    .replace("SharedAccessKey=SAS_KEY_VALUE", `SharedAccessKey=${key}`);
}

// Admin errors are answered at once (4xx are not retried); the short
// retries only keep a failure from outlasting the test's timeout.
const retryOptions = { maxRetries: 1, retryDelayInMs: 200 };

const clients = [
  {
    label: "7.10.0-beta.2 over http",
    prefix: "beta",
    scheme: "http:",
    admin: (cs = broker.connectionString) => new BetaAdmin(cs, { retryOptions }),
    messaging: () => new BetaClient(broker.connectionString, { retryOptions: { retryDelayInMs: 1_000 } }),
  },
  {
    label: "7.9.5 over https",
    prefix: "stable",
    scheme: "https:",
    admin: (cs = broker.connectionString) =>
      new StableAdmin(cs, { retryOptions, tlsOptions: { ca: readFileSync(broker.caPath) } }),
    messaging: () => new StableClient(broker.connectionString, { retryOptions: { retryDelayInMs: 1_000 } }),
  },
];

// messagingClient makes c's ServiceBusClient, closed with the broker.
function messagingClient(c) {
  const client = c.messaging();
  broker.clients.push(client);
  return client;
}

// schemeOf is the scheme of the request that produced an admin result.
const schemeOf = (result) => new URL(result._response.request.url).protocol;

// rejectsWith checks that promise fails with the client's error code
// (err.code) and the HTTP status.
async function rejectsWith(promise, code, statusCode, what) {
  await assert.rejects(promise, (err) => {
    assert.equal(err.code, code, `${what}: ${err.message}`);
    assert.equal(err.statusCode, statusCode, what);
    return true;
  });
}

// pick is the subset of o with the keys of like.
const pick = (o, like) => Object.fromEntries(Object.keys(like).map((k) => [k, o[k]]));

// collect runs an async iterator to the end.
async function collect(iter) {
  const out = [];
  for await (const x of iter) out.push(x);
  return out;
}

test("7.9.5 without the authority refuses walbus's certificate: it does speak TLS", async () => {
  const admin = new StableAdmin(broker.connectionString, { retryOptions });
  await assert.rejects(admin.getNamespaceProperties(), (err) => {
    assert.match(String(err.code), /CERT|SELF_SIGNED|UNABLE_TO_VERIFY/, err.message);
    return true;
  });
});

for (const c of clients) {
  const name = (n) => `${c.prefix}-${n}`;

  test(`${c.label}: the namespace`, async () => {
    const ns = await c.admin().getNamespaceProperties();
    assert.equal(schemeOf(ns), c.scheme);
    assert.equal(ns.messagingSku, "Standard");
    assert.equal(typeof ns.name, "string");
    assert.ok(ns.createdAt instanceof Date && !isNaN(ns.createdAt), `createdAt ${ns.createdAt}`);
  });

  test(`${c.label}: a queue created with settings reads them back; queueExists`, async () => {
    const admin = c.admin();
    const settings = {
      lockDuration: "PT45S",
      maxDeliveryCount: 7,
      maxSizeInMegabytes: 2048,
      requiresSession: false,
      requiresDuplicateDetection: true,
      duplicateDetectionHistoryTimeWindow: "PT5M",
      defaultMessageTimeToLive: "PT1H",
      deadLetteringOnMessageExpiration: true,
      userMetadata: "the orders",
    };
    const created = await admin.createQueue(name("orders"), settings);
    assert.equal(schemeOf(created), c.scheme, "the client's scheme");
    assert.equal(created.name, name("orders"));
    assert.deepEqual(pick(created, settings), settings, "the created queue");
    const got = await admin.getQueue(name("orders"));
    assert.equal(got.name, name("orders"));
    assert.deepEqual(pick(got, settings), settings, "the queue read back");
    assert.equal(got.status, "Active");

    const sessions = await admin.createQueue(name("sessions"), { requiresSession: true });
    assert.equal(sessions.requiresSession, true);
    assert.equal((await admin.getQueue(name("sessions"))).requiresSession, true);

    assert.equal(await admin.queueExists(name("orders")), true);
    assert.equal(await admin.queueExists(name("nothere")), false);
  });

  test(`${c.label}: runtime properties count what the SDK sent, dead-lettered and scheduled`, async () => {
    const admin = c.admin();
    const q = name("counted");
    await admin.createQueue(q);
    const empty = await admin.getQueueRuntimeProperties(q);
    assert.deepEqual(
      pick(empty, { activeMessageCount: 0, deadLetterMessageCount: 0, scheduledMessageCount: 0, totalMessageCount: 0 }),
      { activeMessageCount: 0, deadLetterMessageCount: 0, scheduledMessageCount: 0, totalMessageCount: 0 },
    );

    const client = messagingClient(c);
    const sender = client.createSender(q);
    await sender.sendMessages(["a", "b", "c"].map((body) => ({ body })));
    await sender.scheduleMessages({ body: "later" }, new Date(Date.now() + 3_600_000));
    const receiver = client.createReceiver(q);
    const [first] = await receiveAll(receiver, 1);
    assert.equal(first?.body, "a");
    await receiver.deadLetterMessage(first, { deadLetterReason: "test" });

    const rt = await admin.getQueueRuntimeProperties(q);
    assert.equal(rt.name, q);
    assert.deepEqual(
      pick(rt, { activeMessageCount: 0, deadLetterMessageCount: 0, scheduledMessageCount: 0, totalMessageCount: 0 }),
      { activeMessageCount: 2, deadLetterMessageCount: 1, scheduledMessageCount: 1, totalMessageCount: 4 },
    );
    assert.ok(rt.sizeInBytes > 0, `sizeInBytes ${rt.sizeInBytes}`);
    for (const k of ["createdAt", "modifiedAt", "accessedAt"]) {
      assert.ok(rt[k] instanceof Date && !isNaN(rt[k]), `${k} ${rt[k]}`);
    }

    // The list of runtime properties has the same counts.
    const listed = (await collect(admin.listQueuesRuntimeProperties())).find((r) => r.name === q);
    assert.equal(listed?.activeMessageCount, 2, "listed active count");
    assert.equal(listed?.deadLetterMessageCount, 1, "listed dead-letter count");
  });

  test(`${c.label}: updateQueue changes settings; RequiresSession stays; a missing queue`, async () => {
    const admin = c.admin();
    const q = name("updated");
    await admin.createQueue(q, { maxDeliveryCount: 5, lockDuration: "PT30S" });
    const props = await admin.getQueue(q);
    const updated = await admin.updateQueue({ ...props, maxDeliveryCount: 9, lockDuration: "PT2M", userMetadata: "changed" });
    assert.deepEqual(pick(updated, { maxDeliveryCount: 0, lockDuration: "", userMetadata: "" }), {
      maxDeliveryCount: 9,
      lockDuration: "PT2M",
      userMetadata: "changed",
    });
    const got = await admin.getQueue(q);
    assert.deepEqual(pick(got, { maxDeliveryCount: 0, lockDuration: "", userMetadata: "" }), {
      maxDeliveryCount: 9,
      lockDuration: "PT2M",
      userMetadata: "changed",
    });
    await rejectsWith(admin.updateQueue({ ...got, requiresSession: true }), "ServiceError", 400, "changing RequiresSession");
    await rejectsWith(admin.updateQueue({ ...got, name: name("neverthere") }), "MessageEntityNotFoundError", 404, "a missing queue");
    await rejectsWith(admin.createQueue(name("bad"), { lockDuration: "PT10M" }), "ServiceError", 400, "a lock over 5 minutes");
  });

  test(`${c.label}: ForwardTo, which the client sends as sb://host:port/name, forwards`, async () => {
    const admin = c.admin();
    const target = name("fwd-target");
    await admin.createQueue(target);
    const fwd = await admin.createQueue(name("fwd-source"), { forwardTo: target });
    assert.match(fwd.forwardTo ?? "", new RegExp(`(^|/)${target}$`), "forwardTo names the target");
    const client = messagingClient(c);
    await client.createSender(name("fwd-source")).sendMessages({ body: "along" });
    const got = await receiveAll(client.createReceiver(target), 1);
    assert.deepEqual(got.map((m) => m.body), ["along"]);
  });

  test(`${c.label}: listQueues pages past 100 by the next link`, async () => {
    const admin = c.admin();
    const want = [];
    for (let i = 0; i < 105; i++) want.push(name(`page-${String(i).padStart(3, "0")}`));
    for (const q of want) await admin.createQueue(q);

    // Every queue, once: the other tests' and the other client's too.
    const all = (await collect(admin.listQueues())).map((q) => q.name);
    assert.equal(new Set(all).size, all.length, "no queue listed twice");
    assert.deepEqual(all.filter((n) => n.startsWith(name("page-"))).sort(), want);

    // Without a page size the server's own is 100: the second page comes
    // only from the feed's next link.
    const pages = await collect(admin.listQueues().byPage());
    assert.equal(pages[0].length, 100, "the first page holds 100");
    assert.ok(pages.length >= 2, `${pages.length} pages`);
    assert.deepEqual(pages.flat().map((q) => q.name), all);

    const small = await collect(admin.listQueues().byPage({ maxPageSize: 30 }));
    assert.ok(small.every((p) => p.length <= 30), `page sizes ${small.map((p) => p.length)}`);
    assert.ok(small.length >= Math.ceil(all.length / 30), `${small.length} pages of 30`);
    assert.deepEqual(small.flat().map((q) => q.name), all);
  }, { timeout: 240_000 });

  test(`${c.label}: deleteQueue; then getQueue is MessageEntityNotFoundError; a second create is MessageEntityAlreadyExistsError`, async () => {
    const admin = c.admin();
    const q = name("deleted");
    await admin.createQueue(q);
    await rejectsWith(admin.createQueue(q), "MessageEntityAlreadyExistsError", 409, "a second create");
    await rejectsWith(admin.createQueue(q.toUpperCase()), "MessageEntityAlreadyExistsError", 409, "names ignore case");
    await admin.deleteQueue(q);
    await rejectsWith(admin.getQueue(q), "MessageEntityNotFoundError", 404, "get after delete");
    await rejectsWith(admin.getQueueRuntimeProperties(q), "MessageEntityNotFoundError", 404, "runtime after delete");
    await rejectsWith(admin.deleteQueue(q), "MessageEntityNotFoundError", 404, "a second delete");
    assert.equal(await admin.queueExists(q), false);
    // The name is free again.
    assert.equal((await admin.createQueue(q)).name, q);
  });

  // Topics, subscriptions and rules: one topic through the next tests, in
  // order, so that a failing step still lets the later ones run.
  const topic = name("news");
  const topicSettings = { defaultMessageTimeToLive: "P1D", maxSizeInMegabytes: 2048, userMetadata: "news", supportOrdering: true };
  const ruleView = (r) => pick(r, { name: "", filter: {}, action: {} });

  test(`${c.label}: a topic created with settings reads them back; topicExists; listTopics`, async () => {
    const admin = c.admin();
    const created = await admin.createTopic(topic, topicSettings);
    assert.equal(created.name, topic);
    assert.deepEqual(pick(created, topicSettings), topicSettings, "the created topic");
    assert.deepEqual(pick(await admin.getTopic(topic), topicSettings), topicSettings, "the topic read back");
    assert.equal(await admin.topicExists(topic), true);
    assert.equal(await admin.topicExists(name("nonews")), false);
    await rejectsWith(admin.createTopic(topic), "MessageEntityAlreadyExistsError", 409, "a second topic");
    await rejectsWith(admin.getTopic(name("nonews")), "MessageEntityNotFoundError", 404, "a missing topic");
    assert.ok((await collect(admin.listTopics())).some((t) => t.name === topic), "listTopics has it");
    const updated = await admin.updateTopic({ ...created, userMetadata: "more news" });
    assert.equal(updated.userMetadata, "more news");
  });

  test(`${c.label}: subscriptions, one with a default rule: get, exists, list, update, errors`, async () => {
    const admin = c.admin();
    const red = await admin.createSubscription(topic, "red", {
      maxDeliveryCount: 4,
      lockDuration: "PT30S",
      defaultRuleOptions: { name: "isRed", filter: { sqlExpression: "color = 'red'" }, action: { sqlExpression: "SET tagged = 'yes'" } },
    });
    assert.deepEqual(pick(red, { topicName: "", subscriptionName: "", maxDeliveryCount: 0, lockDuration: "" }), {
      topicName: topic,
      subscriptionName: "red",
      maxDeliveryCount: 4,
      lockDuration: "PT30S",
    });
    await admin.createSubscription(topic, "all");
    await rejectsWith(admin.createSubscription(topic, "all"), "MessageEntityAlreadyExistsError", 409, "a second subscription");
    await rejectsWith(admin.createSubscription(name("nonews"), "x"), "MessageEntityNotFoundError", 404, "a missing topic");
    const gotRed = await admin.getSubscription(topic, "red");
    assert.equal(gotRed.maxDeliveryCount, 4);
    assert.equal(gotRed.status, "Active");
    assert.equal(await admin.subscriptionExists(topic, "red"), true);
    assert.equal(await admin.subscriptionExists(topic, "blue"), false);
    await rejectsWith(admin.getSubscription(topic, "blue"), "MessageEntityNotFoundError", 404, "a missing subscription");
    assert.deepEqual((await collect(admin.listSubscriptions(topic))).map((s) => s.subscriptionName).sort(), ["all", "red"]);
    const updated = await admin.updateSubscription({ ...gotRed, maxDeliveryCount: 6, userMetadata: "reds" });
    assert.equal(updated.maxDeliveryCount, 6);
    const again = await admin.getSubscription(topic, "red");
    assert.deepEqual(pick(again, { maxDeliveryCount: 0, userMetadata: "" }), { maxDeliveryCount: 6, userMetadata: "reds" });
  });

  test(`${c.label}: the default rule reads back as created, and $Default without one`, async () => {
    const admin = c.admin();
    const allRules = await collect(admin.listRules(topic, "all"));
    assert.deepEqual(allRules.map(ruleView), [
      { name: "$Default", filter: { sqlExpression: "1=1", sqlParameters: undefined }, action: { sqlExpression: undefined, sqlParameters: undefined } },
    ]);
    assert.deepEqual(ruleView(await admin.getRule(topic, "red", "isRed")), {
      name: "isRed",
      filter: { sqlExpression: "color = 'red'", sqlParameters: undefined },
      action: { sqlExpression: "SET tagged = 'yes'", sqlParameters: undefined },
    });
  });

  // A SQL filter with a parameter and an action; a correlation filter with
  // typed application properties (the client sends numbers as doubles).
  const applicationProperties = { kind: "big", n: 5, ratio: 1.5, vip: true, at: new Date("2000-01-01T00:00:00Z") };
  const correlation = { correlationId: "cid", subject: "big", applicationProperties };

  test(`${c.label}: rules: SQL with a parameter and an action, correlation with typed properties, list, errors`, async () => {
    const admin = c.admin();
    const sql = await admin.createRule(
      topic,
      "red",
      "expensive",
      { sqlExpression: "amount > @min", sqlParameters: { "@min": 100 } },
      { sqlExpression: "SET level = @level", sqlParameters: { "@level": "high" } },
    );
    const wantSql = {
      name: "expensive",
      filter: { sqlExpression: "amount > @min", sqlParameters: { "@min": 100 } },
      action: { sqlExpression: "SET level = @level", sqlParameters: { "@level": "high" } },
    };
    assert.deepEqual(ruleView(sql), wantSql, "the created rule");
    assert.deepEqual(ruleView(await admin.getRule(topic, "red", "expensive")), wantSql, "the rule read back");

    const created = await admin.createRule(topic, "red", "big", correlation);
    assert.equal(created.filter.correlationId, "cid");
    const big = await admin.getRule(topic, "red", "big");
    assert.equal(big.name, "big");
    assert.equal(big.filter.correlationId, "cid");
    assert.equal(big.filter.subject, "big");
    assert.deepEqual(big.filter.applicationProperties, applicationProperties, "typed properties read back");
    assert.equal(big.action.sqlExpression, undefined, "no action");

    await rejectsWith(admin.createRule(topic, "red", "big", { subject: "x" }), "MessageEntityAlreadyExistsError", 409, "a second rule");
    await rejectsWith(admin.createRule(topic, "red", "broken", { sqlExpression: "color = " }), "ServiceError", 400, "bad SQL");
    await rejectsWith(admin.createRule(topic, "nosub", "r", { subject: "x" }), "MessageEntityNotFoundError", 404, "a missing subscription");
    await rejectsWith(admin.getRule(topic, "red", "nothere"), "MessageEntityNotFoundError", 404, "a missing rule");
    // The correlation filter that routes below: string and boolean properties.
    await admin.createRule(topic, "red", "vip", { subject: "vip", applicationProperties: { kind: "big", vip: true } });
    assert.deepEqual((await collect(admin.listRules(topic, "red"))).map((r) => r.name), ["big", "expensive", "isRed", "vip"]);
    const paged = await collect(admin.listRules(topic, "red").byPage({ maxPageSize: 3 }));
    assert.deepEqual(paged.map((p) => p.map((r) => r.name)), [["big", "expensive", "isRed"], ["vip"]]);
    assert.equal(await admin.ruleExists(topic, "red", "big"), true);
    assert.equal(await admin.ruleExists(topic, "red", "nothere"), false);
  });

  test(`${c.label}: the rules route what the SDK sends; runtime properties count it`, async () => {
    const admin = c.admin();
    // Each message matches at most one of red's rules.
    const client = messagingClient(c);
    await client.createSender(topic).sendMessages([
      { body: "r", applicationProperties: { color: "red" } },
      { body: "b", applicationProperties: { color: "blue" } },
      { body: "v", subject: "vip", applicationProperties: { kind: "big", vip: true } },
      { body: "w", subject: "vip", applicationProperties: { kind: "big", vip: false } },
      { body: "e", applicationProperties: { amount: 500 } },
    ]);
    const redRt = await admin.getSubscriptionRuntimeProperties(topic, "red");
    assert.deepEqual(pick(redRt, { topicName: "", subscriptionName: "", activeMessageCount: 0, totalMessageCount: 0 }), {
      topicName: topic,
      subscriptionName: "red",
      activeMessageCount: 3,
      totalMessageCount: 3,
    }, "red holds r, v and e");
    assert.equal((await admin.getSubscriptionRuntimeProperties(topic, "all")).activeMessageCount, 5);
    const topicRt = await admin.getTopicRuntimeProperties(topic);
    assert.equal(topicRt.subscriptionCount, 2);
    const got = await receiveAll(client.createReceiver(topic, "red", { receiveMode: "receiveAndDelete" }), 4, { windowMs: 2_000 });
    const byBody = Object.fromEntries(got.map((m) => [m.body, m.applicationProperties ?? {}]));
    assert.deepEqual(Object.keys(byBody).sort(), ["e", "r", "v"]);
    assert.equal(byBody.r.tagged, "yes", "isRed's action");
    assert.equal(byBody.e.level, "high", "expensive's action");
    assert.equal(byBody.v.tagged, undefined, "vip has no action");
  });

  test(`${c.label}: updating and deleting rules, a subscription and the topic`, async () => {
    const admin = c.admin();
    const big = await admin.getRule(topic, "red", "big");
    const updated = await admin.updateRule(topic, "red", { ...big, filter: { ...correlation, applicationProperties: { kind: "huge" } } });
    assert.deepEqual(updated.filter.applicationProperties, { kind: "huge" });
    assert.deepEqual((await admin.getRule(topic, "red", "big")).filter.applicationProperties, { kind: "huge" });
    await rejectsWith(
      admin.updateRule(topic, "red", { name: "nothere", filter: { subject: "x" } }),
      "MessageEntityNotFoundError",
      404,
      "updating a missing rule",
    );
    await admin.deleteRule(topic, "red", "isRed");
    await rejectsWith(admin.getRule(topic, "red", "isRed"), "MessageEntityNotFoundError", 404, "a deleted rule");
    await rejectsWith(admin.deleteRule(topic, "red", "isRed"), "MessageEntityNotFoundError", 404, "a second rule delete");
    assert.deepEqual((await collect(admin.listRules(topic, "red"))).map((r) => r.name), ["big", "expensive", "vip"]);
    await admin.deleteSubscription(topic, "all");
    await rejectsWith(admin.getSubscription(topic, "all"), "MessageEntityNotFoundError", 404, "a deleted subscription");
    assert.deepEqual((await collect(admin.listSubscriptions(topic))).map((s) => s.subscriptionName), ["red"]);
    await admin.deleteTopic(topic);
    await rejectsWith(admin.getTopic(topic), "MessageEntityNotFoundError", 404, "a deleted topic");
    await rejectsWith(admin.getSubscription(topic, "red"), "MessageEntityNotFoundError", 404, "the subscription of a deleted topic");
    assert.equal(await admin.topicExists(topic), false);
  });

  // Text the client sends escaped comes back as sent: quotes, an ampersand,
  // angle brackets (no line break: @azure/core-xml's stringifyXML drops
  // every "\n" from the request). A rule read and updated unchanged still
  // filters the same.
  test(`${c.label}: text with quotes, & and < > reads back as sent`, async () => {
    const admin = c.admin();
    const text = `it's "quoted" & <tagged>`;
    const q = await admin.createQueue(name("text"), { userMetadata: text });
    assert.equal(q.userMetadata, text, "created");
    assert.equal((await admin.getQueue(name("text"))).userMetadata, text, "read back");
  });

  test(`${c.label}: a SQL rule with quotes reads back as sent, and updated as read filters the same`, async () => {
    const admin = c.admin();
    const t = name("texttopic");
    await admin.createTopic(t);
    await admin.createSubscription(t, "s", {
      defaultRuleOptions: { name: "quoted", filter: { sqlExpression: "color = 'red' AND size <> 'big'" } },
    });
    const rule = await admin.getRule(t, "s", "quoted");
    assert.equal(rule.filter.sqlExpression, "color = 'red' AND size <> 'big'", "the SQL read back");
    await admin.updateRule(t, "s", rule);
    assert.equal((await admin.getRule(t, "s", "quoted")).filter.sqlExpression, "color = 'red' AND size <> 'big'", "after the update");
    const client = messagingClient(c);
    await client.createSender(t).sendMessages({ body: "x", applicationProperties: { color: "red", size: "small" } });
    assert.equal((await admin.getSubscriptionRuntimeProperties(t, "s")).activeMessageCount, 1, "the updated rule still matches");
  });

  test(`${c.label}: a key without Manage rights, or a wrong key, is UnauthorizedRequestError`, async () => {
    for (const cs of [connectionString("sender", "c2VuZGVy"), connectionString("RootManageSharedAccessKey", "wrong")]) {
      const admin = c.admin(cs);
      await rejectsWith(admin.createQueue(name("refused")), "UnauthorizedRequestError", 401, cs);
      await rejectsWith(admin.getQueue(name("orders")), "UnauthorizedRequestError", 401, cs);
      await rejectsWith(collect(admin.listQueues()), "UnauthorizedRequestError", 401, cs);
    }
    assert.equal(await c.admin().queueExists(name("refused")), false, "nothing was created");
  });
}

// Topics and subscriptions: fan-out to every subscription, a subscription's
// dead-letter queue, and rules through ServiceBusRuleManager (add-rule,
// remove-rule and enumerate-rules on t/Subscriptions/s/$management): the
// listed shapes, paging by name, the errors, and filters and actions on
// what a subscription receives.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { brokerSuite, receiveAll, uniqueId } from "./harness.mjs";

const topicProperties = {
  DefaultMessageTimeToLive: "PT1H",
  DuplicateDetectionHistoryTimeWindow: "PT20S",
  RequiresDuplicateDetection: false,
};

// The emulator's defaults for a subscription.
const subscriptionProperties = {
  DeadLetteringOnMessageExpiration: false,
  DefaultMessageTimeToLive: "PT1H",
  LockDuration: "PT1M",
  MaxDeliveryCount: 3,
  ForwardDeadLetteredMessagesTo: "",
  ForwardTo: "",
  RequiresSession: false,
};

// topic is a topic of the Config.json; subscriptions maps each name to its
// rules (undefined: none listed, so the subscription gets $Default).
function topic(name, subscriptions) {
  return {
    Name: name,
    Properties: topicProperties,
    Subscriptions: Object.entries(subscriptions).map(([sub, rules]) => ({
      Name: sub,
      Properties: subscriptionProperties,
      ...(rules ? { Rules: rules } : {}),
    })),
  };
}

const { broker, test } = brokerSuite({});
// The harness writes queues only; this file's broker has topics instead.
writeFileSync(
  broker.configPath,
  JSON.stringify({
    UserConfig: {
      Namespaces: [
        {
          Name: "sbemulatorns",
          Queues: [],
          Topics: [
            topic("fanout", { s1: undefined, s2: undefined }),
            topic("rules", {
              manage: undefined,
              configured: [
                {
                  Name: "sqlcfg",
                  Properties: {
                    FilterType: "Sql",
                    SqlFilter: { SqlExpression: "color = 'red'" },
                    Action: { SqlExpression: "SET tagged = 1" },
                  },
                },
              ],
            }),
            topic("filtered", { f1: undefined, all: undefined }),
            topic("dlq", { d1: undefined }),
          ],
        },
      ],
      Logging: { Type: "File" },
    },
  }),
);

// listAll lists a subscription's rules by page: listRules()'s own iterator
// yields one undefined when there is no rule at all (core-paging's item
// iterator takes the missing first page for an item), whatever the server
// answers.
async function listAll(ruleManager) {
  const rules = [];
  for await (const page of ruleManager.listRules().byPage()) rules.push(...page);
  return rules;
}

const defaultRule = { name: "$Default", filter: { sqlExpression: "1=1" }, action: {} };

test("a message sent to a topic reaches every subscription", async () => {
  const client = broker.client();
  const ids = [uniqueId("fan"), uniqueId("fan"), uniqueId("fan")];
  await client.createSender("fanout").sendMessages(
    ids.map((id, i) => ({ body: `m${i}`, messageId: id, applicationProperties: { n: i } })),
  );
  for (const sub of ["s1", "s2"]) {
    const receiver = client.createReceiver("fanout", sub);
    const got = await receiveAll(receiver, 3);
    assert.deepEqual(got.map((m) => m.messageId), ids, `${sub} gets each message, in order`);
    assert.deepEqual(got.map((m) => m.body), ["m0", "m1", "m2"]);
    assert.deepEqual(got.map((m) => m.applicationProperties.n), [0, 1, 2]);
    for (const m of got) await receiver.completeMessage(m);
    assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), [], `${sub} is empty`);
  }
});

test("a subscription's rules are listed, added, paged by name and removed", async () => {
  const client = broker.client();
  const ruleManager = client.createRuleManager("rules", "manage");
  assert.deepStrictEqual(await listAll(ruleManager), [defaultRule], "a new subscription has $Default: 1=1 and no action");

  await ruleManager.createRule("sqlRule", { sqlExpression: "price > 10" }, { sqlExpression: "SET sys.label = 'expensive'" });
  const applicationProperties = { key1: "value1", key2: 2, key3: true, key4: new Date("2000-01-01T00:00:00Z") };
  const correlation = {
    correlationId: "correlationId",
    messageId: "messageId",
    to: "to",
    replyTo: "replyTo",
    subject: "label",
    sessionId: "sessionId",
    replyToSessionId: "replyToSessionId",
    contentType: "application/json",
    applicationProperties,
  };
  await ruleManager.createRule("correlationRule", correlation);
  await ruleManager.createRule("subjectOnly", { subject: "red" });

  const rules = await listAll(ruleManager);
  assert.deepStrictEqual(rules, [
    defaultRule,
    { name: "correlationRule", filter: correlation, action: {} },
    { name: "sqlRule", filter: { sqlExpression: "price > 10" }, action: { sqlExpression: "SET sys.label = 'expensive'" } },
    {
      name: "subjectOnly",
      // Fields not set come back null, and the properties an empty map.
      filter: {
        correlationId: null,
        messageId: null,
        to: null,
        replyTo: null,
        subject: "red",
        sessionId: null,
        replyToSessionId: null,
        contentType: null,
        applicationProperties: {},
      },
      action: {},
    },
  ]);

  const pages = [];
  for await (const page of ruleManager.listRules().byPage({ maxPageSize: 1 })) pages.push(page.map((r) => r.name));
  assert.deepStrictEqual(pages, [["$Default"], ["correlationRule"], ["sqlRule"], ["subjectOnly"]], "one rule a page, by name");
  const twos = [];
  for await (const page of ruleManager.listRules().byPage({ maxPageSize: 2 })) twos.push(page.map((r) => r.name));
  assert.deepStrictEqual(twos, [["$Default", "correlationRule"], ["sqlRule", "subjectOnly"]]);

  for (const name of ["subjectOnly", "correlationRule", "$Default"]) await ruleManager.deleteRule(name);
  assert.deepStrictEqual((await listAll(ruleManager)).map((r) => r.name), ["sqlRule"]);
  await ruleManager.deleteRule("sqlRule");
  assert.deepStrictEqual(await listAll(ruleManager), [], "a subscription can have no rules");
});

test("rules from Config.json are listed with their filter and action", async () => {
  const ruleManager = broker.client().createRuleManager("rules", "configured");
  assert.deepStrictEqual(await listAll(ruleManager), [
    { name: "sqlcfg", filter: { sqlExpression: "color = 'red'" }, action: { sqlExpression: "SET tagged = 1" } },
  ]);
});

test("rule errors: a duplicate, a missing rule, bad SQL, a long name, a missing subscription", async () => {
  const client = broker.client();
  const ruleManager = client.createRuleManager("rules", "manage");
  await ruleManager.createRule("ruleName", { subject: "yellow" });

  await assert.rejects(ruleManager.createRule("ruleName", { subject: "red" }), (err) => {
    assert.equal(err.code, "MessagingEntityAlreadyExists");
    assert.match(err.message, /The messaging entity '.*ruleName' already exists\./);
    return true;
  });
  await assert.rejects(ruleManager.deleteRule("noSuchRule"), (err) => {
    assert.equal(err.code, "MessagingEntityNotFound");
    assert.match(err.message, /noSuchRule' could not be found/);
    return true;
  });
  // Refused at once as bad input (400 com.microsoft:argument-error), which
  // the SDK does not retry.
  await assert.rejects(ruleManager.createRule("badSql", { sqlExpression: "price = = 10" }), (err) => {
    assert.equal(err.retryable, false, "not retried");
    assert.match(err.message, /badSql/);
    return true;
  });
  await assert.rejects(
    ruleManager.createRule("badAction", { sqlExpression: "1=1" }, { sqlExpression: "SET" }),
    (err) => err.retryable === false,
  );
  await assert.rejects(ruleManager.createRule("x".repeat(51), { sqlExpression: "1=1" }), (err) => {
    assert.equal(err.retryable, false);
    assert.match(err.message, /length must be 1 to 50/);
    return true;
  });
  assert.deepStrictEqual((await listAll(ruleManager)).map((r) => r.name), ["ruleName"], "nothing refused was added");
  await ruleManager.deleteRule("ruleName");

  await assert.rejects(listAll(client.createRuleManager("rules", "noSuchSubscription")), (err) => {
    assert.equal(err.code, "MessagingEntityNotFound");
    return true;
  });
});

test("after $Default is replaced, a subscription gets what its rules match, changed by their actions", async () => {
  const client = broker.client();
  const ruleManager = client.createRuleManager("filtered", "f1");
  await ruleManager.deleteRule("$Default");
  await ruleManager.createRule(
    "redRule",
    { sqlExpression: "color = 'red' AND quantity > 5" },
    { sqlExpression: "SET priority = 'high'; SET sys.label = 'urgent'; REMOVE quantity" },
  );
  await ruleManager.createRule("blueRule", { applicationProperties: { color: "blue" } });

  const orders = [
    { id: uniqueId("red-big"), color: "red", quantity: 10 },
    { id: uniqueId("red-small"), color: "red", quantity: 1 },
    { id: uniqueId("green"), color: "green", quantity: 10 },
    { id: uniqueId("blue"), color: "blue", quantity: 3 },
  ];
  await client.createSender("filtered").sendMessages(
    orders.map((o) => ({ body: o.id, messageId: o.id, subject: o.color, applicationProperties: { color: o.color, quantity: o.quantity } })),
  );

  const receiver = client.createReceiver("filtered", "f1");
  const got = await receiveAll(receiver, 3, { windowMs: 2_000 });
  assert.deepEqual(got.map((m) => m.messageId), [orders[0].id, orders[3].id], "only the big red order and the blue one");
  const [red, blue] = got;
  assert.equal(red.subject, "urgent", "the action set sys.label");
  assert.equal(red.applicationProperties.priority, "high", "the action added a property");
  assert.equal(red.applicationProperties.color, "red");
  assert.equal("quantity" in red.applicationProperties, false, "the action removed a property");
  assert.equal(red.applicationProperties.RuleName, "redRule", "a copy made by an action names its rule");
  assert.equal(blue.subject, "blue", "a rule without an action leaves the message as sent");
  assert.deepEqual({ ...blue.applicationProperties }, { color: "blue", quantity: 3 });
  for (const m of got) await receiver.completeMessage(m);

  // The subscription beside it, with $Default, got every order unchanged.
  const all = client.createReceiver("filtered", "all");
  const everything = await receiveAll(all, 4);
  assert.deepEqual(everything.map((m) => m.messageId), orders.map((o) => o.id));
  assert.deepEqual(everything.map((m) => m.subject), orders.map((o) => o.color));
  for (const m of everything) await all.completeMessage(m);
});

test("a subscription's dead-letter queue takes what its receiver dead-letters", async () => {
  const client = broker.client();
  const id = uniqueId("dead");
  await client.createSender("dlq").sendMessages({ body: "poison", messageId: id });
  const receiver = client.createReceiver("dlq", "d1");
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.equal(m?.messageId, id);
  await receiver.deadLetterMessage(m, { deadLetterReason: "bad order", deadLetterErrorDescription: "no such product" });
  assert.deepEqual(await receiver.peekMessages(10), [], "gone from the subscription");

  const dlq = client.createReceiver("dlq", "d1", { subQueueType: "deadLetter" });
  const peeked = await dlq.peekMessages(10);
  assert.deepEqual(peeked.map((p) => p.messageId), [id]);
  const [d] = await dlq.receiveMessages(1, { maxWaitTimeInMs: 10_000 });
  assert.equal(d?.messageId, id);
  assert.equal(d.body, "poison");
  assert.equal(d.deadLetterReason, "bad order");
  assert.equal(d.deadLetterErrorDescription, "no such product");
  await dlq.completeMessage(d);
  assert.deepEqual(await dlq.peekMessages(10), [], "the dead-letter queue is empty after complete");
});

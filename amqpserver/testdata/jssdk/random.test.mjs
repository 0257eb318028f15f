// A seeded random workload through the JavaScript SDK, with a ledger of
// every message: the JS counterpart of the Go SDK's random workload test
// (amqpserver/sdk_random_test.go), built around what the JS SDK does its own
// way: receiveMessages drains the link after every call, subscribe() streams
// with a handler (auto-complete or not, several calls at once), the message
// iterator, receivers closed while messages are on their way, settlement by
// lock token once a message's link is gone, TTLs that dead-letter.
//
// Senders, batching receivers, a subscribing receiver and session receivers
// work at once on four queues. Each message carries a unique MessageId, and
// the ledger checks every delivery as it happens (body, session, FIFO within
// a session, DeliveryCount, properties, dead-letter reason, never two live
// locks, never after it left for good) and every settlement's answer. At the
// end everything is drained, and every message sent (except cancelled
// scheduled ones and duplicates) must have left exactly once: completed,
// received and deleted, or dead-lettered and then completed from the
// dead-letter queue; peeking the queues, their dead-letter queues and the
// sessions must find nothing.
//
// A delivery may repeat only where Service Bus allows it: after an abandon,
// after a lock ran out, or when the SDK dropped a message of a link it was
// closing (its lock then runs out unseen: a "ghost" lock, allowed only if
// enough lock durations have passed since the message was last known to be
// free). Deliveries and successful settlements are counted apart: a second
// delivery after an abandon is fine, a second successful completion is not.
//
// WALBUS_JSRANDOM_SEED=7 (or 7,8,9) runs those seeds; WALBUS_JSRANDOM_STEPS
// sets the operations per worker. A failure names its seed and the command
// that repeats it (the operations repeat; their interleaving depends on
// timing, as with any concurrent workload).

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { setTimeout as sleep } from "node:timers/promises";
import { brokerSuite } from "./harness.mjs";

// The Long class of the SDK's sequence numbers (its own dependency).
const Long = createRequire(import.meta.resolve("@azure/service-bus"))("long");

const defaultSeeds = [1, 2, 3];
const seeds = process.env.WALBUS_JSRANDOM_SEED
  ? process.env.WALBUS_JSRANDOM_SEED.split(",").map((s) => Number(s.trim()))
  : defaultSeeds;
const steps = Number(process.env.WALBUS_JSRANDOM_STEPS || 30);
for (const s of seeds) {
  if (!Number.isSafeInteger(s) || s < 0) throw new Error(`WALBUS_JSRANDOM_SEED: ${s} is not a seed`);
}
if (!Number.isSafeInteger(steps) || steps < 1) throw new Error(`WALBUS_JSRANDOM_STEPS: ${steps} is not a step count`);

// The queues of one seed. Lock durations are short so that a lock that
// runs out unseen (a message the SDK dropped while closing a link) comes
// back within the drain; the session queue keeps a long lock, as a session
// receiver that closes releases what it holds.
const lockMs = 4_000;
const kinds = {
  plain: { LockDuration: "PT4S", MaxDeliveryCount: 4 },
  dedup: {
    LockDuration: "PT4S",
    MaxDeliveryCount: 3,
    RequiresDuplicateDetection: true,
    DuplicateDetectionHistoryTimeWindow: "PT10M",
  },
  ttl: { LockDuration: "PT4S", MaxDeliveryCount: 4, DeadLetteringOnMessageExpiration: true },
  sess: { LockDuration: "PT30S", MaxDeliveryCount: 4, RequiresSession: true },
};
const plainKinds = ["plain", "dedup", "ttl"];
const queueName = (seed, kind) => `r${seed}-${kind}`;
const sessionIds = ["s0", "s1", "s2", "s3"];
// radSession is also received by receive-and-delete session receivers; a
// message one of them took for credit but never sent comes back at the end
// of the session (under a new SequenceNumber), so its order is not checked.
const radSession = "s3";

const queues = {};
for (const seed of seeds) for (const [kind, props] of Object.entries(kinds)) queues[queueName(seed, kind)] = props;
const { broker, test } = brokerSuite(queues);

// ---------------------------------------------------------------- PRNG

// mix folds a number into a 32-bit hash state.
function mix(h, v) {
  h = Math.imul(h ^ (v >>> 0), 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

// Rng is mulberry32: a 32-bit state advanced by a constant, then mixed.
class Rng {
  constructor(...parts) {
    let h = 0x2545f491;
    for (const p of parts) {
      if (typeof p === "string") {
        for (const ch of p) h = mix(h, ch.charCodeAt(0));
      } else {
        h = mix(h, Math.floor(p / 0x100000000));
        h = mix(h, p >>> 0);
      }
    }
    this.state = h;
  }
  next() {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let z = this.state;
    z = Math.imul(z ^ (z >>> 15), z | 1);
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
    return ((z ^ (z >>> 14)) >>> 0) / 4294967296;
  }
  int(n) {
    return Math.floor(this.next() * n);
  }
  chance(p) {
    return this.next() < p;
  }
  pick(list) {
    return list[this.int(list.length)];
  }
  // weighted returns the index of one of the weights, drawn in proportion.
  weighted(weights) {
    let n = this.next() * weights.reduce((a, b) => a + b, 0);
    for (let i = 0; i < weights.length; i++) {
      if (n < weights[i]) return i;
      n -= weights[i];
    }
    return weights.length - 1;
  }
}

// ---------------------------------------------------------------- ledger

const errText = (e) => `${e?.code ?? e?.name}: ${e?.message}`;
const bodyKey = (b) =>
  Buffer.isBuffer(b) ? `B:${b.toString("base64")}` : typeof b === "string" ? `S:${b}` : `J:${JSON.stringify(b)}`;
const brief = (b) => bodyKey(b).slice(0, 60);
const reasonMax = "MaxDeliveryCountExceeded";
const reasonTTL = "TTLExpiredException";

// stateKey normalises a session state for comparison.
const stateKey = (s) => (s == null ? "null" : bodyKey(s));

// A record is one message (its MessageId is id) as the ledger knows it.
// state: sending, scheduled, available, held, deferred, deferredHeld, dlq,
// dlqHeld, done. holder is the copy (one delivery) whose lock holds it, or a
// claim while it is being received by SequenceNumber.
class Ledger {
  constructor(seed) {
    this.seed = seed;
    this.clock = 0;
    this.next = 0;
    this.recs = new Map();
    this.order = [];
    this.sessions = Object.fromEntries(sessionIds.map((id) => [id, { holder: null, hold: null, state: null, recs: [] }]));
    this.failures = [];
    this.stopped = false;
    this.tally = {};
    this.timing = {}; // ms spent per operation, for the log
    this.lastTimer = 0; // when the last near schedule activates or TTL runs out
    this.strandedUntil = 0; // when the last lock of a copy no link can settle runs out
    this.acceptQueue = Promise.resolve(); // orders session accepts and closes
  }

  queue(kind) {
    return queueName(this.seed, kind);
  }

  count(what, n = 1) {
    this.tally[what] = (this.tally[what] ?? 0) + n;
  }

  note(rec, text) {
    this.clock++;
    rec.history.push(`${this.clock} ${text}`);
  }

  // fail reports a broken invariant with the history of the messages named
  // and stops the workload.
  fail(text, recs = []) {
    let out = `seed ${this.seed}: ${text}`;
    for (const r of recs) {
      if (r) out += `\n  ${r.id} (${r.kind}, session ${r.session ?? "-"}, ${r.state}, failed ${r.failed}): ${r.history.join("; ")}`;
    }
    this.failures.push(out);
    this.stopped = true;
  }

  // withAccepts runs fn with no other session accept or close under way.
  withAccepts(fn) {
    const run = this.acceptQueue.then(fn);
    this.acceptQueue = run.catch(() => {});
    return run;
  }

  register(by, kind, { session = null, ordered = true, state = "sending", ttl = 0, large = 0, rng }) {
    this.next++;
    const id = `s${this.seed}-${kind}-${this.next}`;
    let body = `${id}:${"x".repeat(rng.int(200))}`;
    if (large) body += "L".repeat(large);
    if (!large && rng.chance(0.2)) body = Buffer.from(body);
    const rec = {
      id, kind, session, by, body, ttl,
      order: -1,
      state,
      holder: null,
      failed: 0, // DeliveryCount of its next delivery
      availableSince: Date.now(),
      props: {},
      // Properties to modify: each change asked for gets a ticket; the
      // value of the latest change that succeeded is the one to see, and
      // a property with a change not yet answered is not checked.
      tickets: 0,
      propTicket: {}, // property -> ticket of the value in props
      pendingProps: {}, // property -> changes not yet answered
      pending: 0, // settlements asked for and not answered yet
      dl: null, // {reason, description} expected in the dead-letter queue
      everDLQ: false,
      seq: null,
      schedSeq: null,
      scheduledAt: 0,
      far: false,
      cancelled: false,
      cancelledAt: 0,
      acked: false,
      deliveries: 0,
      completions: 0,
      leftMainAt: 0,
      leftDLQAt: 0,
      sentAt: Date.now(),
      history: [],
    };
    if (session && ordered) {
      const s = this.sessions[session];
      rec.order = s.recs.length;
      s.recs.push(rec);
    }
    this.recs.set(id, rec);
    this.order.push(rec);
    this.note(rec, `registered by ${by} ${state}${ttl ? ` ttl ${ttl}` : ""}${session ? ` session ${session}` : ""}`);
    return rec;
  }

  message(rec) {
    const m = { messageId: rec.id, body: rec.body, applicationProperties: { n: Number(rec.id.split("-").at(-1)) } };
    if (rec.session) m.sessionId = rec.session;
    if (rec.ttl) m.timeToLive = rec.ttl;
    return m;
  }

  sent(rec, seq = null) {
    rec.acked = true;
    if (seq) rec.schedSeq = rec.seq = seq;
    if (rec.state === "sending") rec.state = "available";
    this.note(rec, `acknowledged${seq ? ` seq ${seq}` : ""}`);
  }

  scheduled(recs, at, far) {
    for (const r of recs) {
      r.scheduledAt = at.getTime();
      r.far = far;
    }
    if (!far) this.lastTimer = Math.max(this.lastTimer, at.getTime());
  }

  cancelling(recs) {
    for (const r of recs) {
      r.cancelled = true;
      this.note(r, "cancel");
    }
  }

  // cancelled records answered cancels. One answered before the message's
  // time was decided before its activation could happen: it must never
  // arrive. A later one may have lost the race to the activation.
  cancelled(recs) {
    const now = Date.now();
    for (const r of recs) {
      this.note(r, "cancel acknowledged");
      if (r.far || now < r.scheduledAt) {
        r.cancelledAt = this.clock;
        this.count("cancelled before their time");
      }
    }
  }

  cfg(rec) {
    return kinds[rec.kind];
  }

  mdc(rec) {
    return this.cfg(rec).MaxDeliveryCount;
  }

  toDLQ(rec, reason, description) {
    rec.state = "dlq";
    rec.dl = { reason, description };
    rec.everDLQ = true;
    rec.availableSince = Date.now();
  }

  // lockEnded applies the end of copy's lock without a settlement (it ran
  // out): a failed delivery, as an abandon.
  lockEnded(copy, why) {
    const rec = copy.rec;
    if (copy.ended) return;
    copy.ended = true;
    if (rec.holder !== copy) return;
    rec.holder = null;
    if (copy.where !== "dlq") rec.failed++; // a dead-letter queue counts no deliveries
    rec.availableSince = copy.lockedUntil();
    this.note(rec, `lock of ${copy.who}'s copy ran out (${why})`);
    this.count("locks that ran out");
    if (copy.where === "dlq") rec.state = "dlq";
    else if (rec.failed >= this.mdc(rec)) {
      this.toDLQ(rec, reasonMax, null);
      rec.availableSince = copy.lockedUntil();
      this.count("dead-lettered by MaxDeliveryCount");
    } else rec.state = copy.where === "deferred" ? "deferred" : "available";
  }

  // received checks a delivery and records it. where: main, dlq or
  // deferred (by SequenceNumber); mode: lock or rad. Returns the copy for a
  // locked delivery, null otherwise (or on failure).
  received(who, kind, where, mode, m, hold = null) {
    const now = Date.now();
    const queue = this.queue(kind);
    const place = `${queue}${where === "dlq" ? "/$DeadLetterQueue" : ""}`;
    const rec = this.recs.get(m.messageId);
    if (!rec) {
      this.fail(`${who} received unknown message ${m.messageId} (${brief(m.body)}) from ${place}`);
      return null;
    }
    const sessionQueue = kind === "sess";
    this.note(rec, `${who} received from ${place} (${mode}${where === "deferred" ? " by seq" : ""}) seq ${m.sequenceNumber} count ${m.deliveryCount}${mode === "lock" ? ` locked until ${m.lockedUntilUtc?.getTime()}` : ""}`);
    const bad = (text, more = []) => {
      this.fail(`${place}: ${who} received ${rec.id}: ${text}`, [rec, ...more]);
      return null;
    };
    if (rec.kind !== kind) return bad(`it was sent to ${this.queue(rec.kind)}`);
    if (bodyKey(m.body) !== bodyKey(rec.body)) return bad(`body ${brief(m.body)}, not the one sent (a duplicate?)`);
    if ((m.sessionId ?? null) !== rec.session) return bad(`session ${m.sessionId}, sent to ${rec.session}`);
    if (!m.sequenceNumber) return bad("no sequenceNumber");
    if (mode === "lock" && !(m.lockedUntilUtc instanceof Date)) return bad("locked, without lockedUntilUtc");
    // When the broker locked it (LockDuration before lockedUntilUtc, on the
    // same clock as ours); a session's messages are locked by the session.
    const lockTime = mode === "lock" && !sessionQueue ? m.lockedUntilUtc.getTime() - lockMs : now;

    // A dead-letter not yet answered has taken effect if the message is in
    // the dead-letter queue.
    const c = rec.holder;
    if (c?.pending?.kind === "deadletter" && where === "dlq") {
      c.appliedEarly = true;
      rec.holder = null;
      this.toDLQ(rec, c.pending.reason, c.pending.description);
      this.note(rec, `${c.who}'s dead-letter took effect`);
    } else if (c && c.msg) {
      // A live lock held elsewhere must have run out before this delivery.
      if (sessionQueue) return bad(`while ${c.who} holds it in its session`);
      if (lockTime < c.lockedUntil()) {
        return bad(`at ${lockTime} while ${c.who}'s lock holds it until ${c.lockedUntil()}`);
      }
      c.superseded = true;
      this.lockEnded(c, `${who} received it`);
    }

    switch (where) {
      case "main":
        switch (rec.state) {
          case "sending":
          case "available":
            break;
          case "scheduled":
            if (rec.far) return bad(`it is scheduled for ${new Date(rec.scheduledAt).toISOString()}`);
            if (rec.cancelledAt) return bad("its schedule was cancelled before its time");
            if (now < rec.scheduledAt || m.enqueuedTimeUtc.getTime() < rec.scheduledAt) {
              return bad(`at ${now}, enqueued ${m.enqueuedTimeUtc.getTime()}: scheduled for ${rec.scheduledAt}`);
            }
            if (rec.cancelled) this.count("cancel lost to activation");
            break;
          default:
            return bad(`but it is ${rec.state}`);
        }
        if (m.state !== "active") return bad(`in state ${m.state}`);
        if (rec.ttl && mode === "lock" && lockTime > m.expiresAtUtc.getTime()) {
          return bad(`locked at ${lockTime}, after it expired at ${m.expiresAtUtc.getTime()}`);
        }
        break;
      case "dlq":
        if (rec.state === "dlq") {
          if (m.deadLetterReason !== rec.dl.reason) return bad(`dead-letter reason ${m.deadLetterReason}, want ${rec.dl.reason}`);
          if (rec.dl.description != null && m.deadLetterErrorDescription !== rec.dl.description) {
            return bad(`dead-letter description ${m.deadLetterErrorDescription}, want ${rec.dl.description}`);
          }
        } else if (rec.state === "available" && !sessionQueue) {
          // Moved there by the broker alone: its time to live ran out, or a
          // lock nobody saw ran out once too often.
          if (m.deadLetterReason === reasonTTL && rec.ttl) {
            if (lockTime < rec.sentAt + rec.ttl) return bad(`expired at ${lockTime}, before ${rec.sentAt} + ${rec.ttl}`);
            this.count("dead-lettered by TTL");
          } else if (m.deadLetterReason === reasonMax && m.deliveryCount >= this.mdc(rec)) {
            this.count("dead-lettered by MaxDeliveryCount after unseen locks");
          } else {
            return bad(`with reason ${m.deadLetterReason}, count ${m.deliveryCount}, but it is available`);
          }
          rec.everDLQ = true;
          rec.dl = { reason: m.deadLetterReason, description: m.deadLetterErrorDescription };
        } else {
          return bad(`but it is ${rec.state}`);
        }
        break;
      case "deferred":
        if (rec.state !== "deferredHeld" || rec.holder?.claim !== who) {
          return bad(`by SequenceNumber, but it is ${rec.state} (holder ${rec.holder?.claim ?? rec.holder?.who})`);
        }
        if (m.state !== "deferred") return bad(`by SequenceNumber in state ${m.state}`);
        break;
    }

    // DeliveryCount: the failed deliveries the ledger knows of, plus any
    // locks it could not see, each of which took a lock duration.
    const extra = m.deliveryCount - rec.failed;
    if (extra < 0) return bad(`DeliveryCount ${m.deliveryCount} after ${rec.failed} failed deliveries`);
    if (extra > 0) {
      const unseen = !sessionQueue && where !== "deferred";
      if (!unseen || lockTime < rec.availableSince + extra * lockMs) {
        return bad(`DeliveryCount ${m.deliveryCount} after ${rec.failed} failed deliveries, at ${lockTime}, free since ${rec.availableSince}`);
      }
      this.count("deliveries after unseen locks ran out", extra);
      rec.failed = m.deliveryCount;
    }
    if (where === "main" && rec.failed >= this.mdc(rec)) return bad(`after ${rec.failed} failed deliveries: past MaxDeliveryCount`);
    for (const [k, v] of Object.entries(rec.props)) {
      if (!rec.pendingProps[k] && m.applicationProperties?.[k] !== v) {
        return bad(`property ${k} is ${m.applicationProperties?.[k]}, set to ${v}`);
      }
    }
    if (where === "main" && rec.order >= 0 && rec.session !== radSession) {
      this.count("FIFO checks");
      for (const earlier of this.sessions[rec.session].recs.slice(0, rec.order)) {
        if (earlier.state === "available" || earlier.state === "sending") {
          return bad(`before ${earlier.id}, sent earlier to the session and available`, [earlier]);
        }
      }
    }

    this.count(`received ${where} ${mode}`);
    rec.seq = m.sequenceNumber;
    rec.deliveries++;
    rec.holder = null;
    if (mode === "rad") {
      rec.state = "done";
      this.leave(rec, who, where === "dlq");
      return null;
    }
    const copy = {
      rec, msg: m, who, where, hold, kind,
      superseded: false,
      ended: false,
      lockedUntil: () => m.lockedUntilUtc.getTime(),
    };
    rec.holder = copy;
    rec.state = where === "dlq" ? "dlqHeld" : where === "deferred" ? "deferredHeld" : "held";
    return copy;
  }

  // leave records that rec left for good.
  leave(rec, who, fromDLQ, known = true) {
    rec.completions++;
    // A peek that begins after the leave was answered must not show it.
    if (known && fromDLQ) rec.leftDLQAt = this.clock;
    else if (known) rec.leftMainAt = this.clock;
    if (rec.completions > 1) this.fail(`${who}: ${rec.id} left its queue a second time`, [rec]);
  }

  // settling records a settlement about to be asked for. An abandon takes
  // effect at once in the ledger: whether it or a lock that runs out first
  // ends the lock, the message is free again with one more failed delivery.
  settling(copy, o) {
    const rec = copy.rec;
    this.note(rec, `${copy.who} asks to ${o.kind}${o.props ? ` ${JSON.stringify(o.props)}` : ""}${copy.superseded ? " (lock gone)" : ""}`);
    this.count(o.kind);
    rec.pending++;
    if (copy.superseded || copy.ended) return;
    if (rec.holder !== copy) {
      this.fail(`${copy.who} settles ${rec.id}, held by ${rec.holder?.who ?? rec.holder?.claim ?? "nobody"}`, [rec]);
      return;
    }
    o.tickets = {};
    for (const k of Object.keys(o.props ?? {})) {
      o.tickets[k] = ++rec.tickets;
      rec.pendingProps[k] = (rec.pendingProps[k] ?? 0) + 1;
    }
    if (o.kind === "deadletter") rec.everDLQ = true; // a peek may see it there before the answer
    if (o.kind !== "abandon") copy.pending = o;
    if (o.kind === "abandon") {
      copy.abandoned = true;
      copy.ended = true;
      rec.holder = null;
      if (copy.where !== "dlq") rec.failed++; // a dead-letter queue counts no deliveries
      rec.availableSince = Date.now();
      if (copy.where === "dlq") rec.state = "dlq";
      else if (rec.failed >= this.mdc(rec)) {
        this.toDLQ(rec, reasonMax, null);
        this.count("dead-lettered by MaxDeliveryCount");
      } else rec.state = copy.where === "deferred" ? "deferred" : "available";
    }
  }

  // settled records the answer to a settlement asked for at askedAt.
  settled(copy, o, err, askedAt) {
    const rec = copy.rec;
    const now = Date.now();
    const sessionQueue = copy.kind === "sess";
    rec.pending--;
    for (const k of Object.keys(o.tickets ?? {})) rec.pendingProps[k]--;
    if (!err) {
      this.note(rec, `${o.kind} by ${copy.who} succeeded`);
      if (copy.superseded) {
        this.fail(`${copy.who}: ${o.kind} of ${rec.id} succeeded after another receiver got it`, [rec]);
        return;
      }
      if (!sessionQueue && askedAt > copy.lockedUntil()) {
        this.fail(`${copy.who}: ${o.kind} of ${rec.id} asked at ${askedAt} succeeded; its lock ended at ${copy.lockedUntil()}`, [rec]);
        return;
      }
      for (const [k, v] of Object.entries(o.props ?? {})) {
        if (o.tickets[k] > (rec.propTicket[k] ?? 0)) {
          rec.props[k] = v;
          rec.propTicket[k] = o.tickets[k];
        }
      }
      copy.pending = null;
      if (copy.appliedEarly && !rec.leftMainAt) rec.leftMainAt = this.clock;
      if (o.kind === "abandon" || copy.appliedEarly) return;
      if (copy.ended) {
        this.fail(`${copy.who}: ${o.kind} of ${rec.id} succeeded after its lock was taken as run out`, [rec]);
        return;
      }
      rec.holder = null;
      switch (o.kind) {
        case "complete":
          rec.state = "done";
          this.leave(rec, copy.who, copy.where === "dlq", !o.auto);
          break;
        case "defer":
          rec.state = "deferred";
          break;
        case "deadletter":
          this.toDLQ(rec, o.reason, o.description);
          rec.leftMainAt = this.clock;
          break;
      }
      return;
    }
    this.note(rec, `${o.kind} by ${copy.who} failed: ${errText(err)}`);
    copy.pending = null;
    if (err.code !== "MessageLockLost" || sessionQueue || copy.appliedEarly) {
      this.fail(`${copy.who}: ${o.kind} of ${rec.id}: ${errText(err)}`, [rec]);
      return;
    }
    if (!copy.superseded && now < copy.lockedUntil()) {
      this.fail(`${copy.who}: ${o.kind} of ${rec.id} lost its lock at ${now}, locked until ${copy.lockedUntil()}`, [rec]);
      return;
    }
    this.count(`${o.kind} after the lock ran out`);
    if (!copy.abandoned) this.lockEnded(copy, `${o.kind} answered lock lost`);
  }

  // renewed checks the answer to a lock renewal asked for at askedAt.
  renewed(copy, before, err, askedAt) {
    const rec = copy.rec;
    const now = Date.now();
    if (!err) {
      this.note(rec, `${copy.who} renewed the lock to ${copy.lockedUntil()}`);
      if (copy.superseded || copy.ended || askedAt > before) {
        this.fail(`${copy.who}: renewing the lock of ${rec.id} (until ${before}, asked at ${askedAt}) succeeded`, [rec]);
      } else if (copy.lockedUntil() < before) {
        this.fail(`${copy.who}: renewing the lock of ${rec.id} moved it back from ${before} to ${copy.lockedUntil()}`, [rec]);
      }
      return;
    }
    this.note(rec, `${copy.who} renew failed: ${errText(err)}`);
    if (err.code !== "MessageLockLost" || (!copy.superseded && now < copy.lockedUntil())) {
      this.fail(`${copy.who}: renewing the lock of ${rec.id} (until ${copy.lockedUntil()}) at ${now}: ${errText(err)}`, [rec]);
      return;
    }
    this.count("renew after the lock ran out");
    this.lockEnded(copy, "renew answered lock lost");
  }

  // released records that a session receiver closed: the locks it held end
  // without counting a delivery.
  released(copies, who) {
    for (const c of copies) {
      const rec = c.rec;
      this.note(rec, `${who} closes its session`);
      if (rec.holder !== c) continue;
      rec.holder = null;
      rec.state = rec.state === "deferredHeld" ? "deferred" : "available";
    }
  }

  // claimDeferred picks deferred messages for who to receive by number
  // (not one whose abandon, deferred again already in the ledger, is not
  // answered yet: until then the broker still has it locked).
  claimDeferred(rng, who, n, match) {
    const cands = this.order.filter((r) => r.state === "deferred" && r.pending === 0 && match(r));
    const out = [];
    while (out.length < n && cands.length) {
      const r = cands.splice(rng.int(cands.length), 1)[0];
      r.state = "deferredHeld";
      r.holder = { claim: who };
      this.note(r, `${who} claims it by seq ${r.seq}`);
      out.push(r);
    }
    return out;
  }

  // unclaim gives back claims whose messages did not arrive.
  unclaim(recs, who) {
    for (const r of recs) {
      if (r.holder?.claim === who) {
        r.holder = null;
        r.state = "deferred";
      }
    }
  }

  holdSession(id, who, hold) {
    const s = this.sessions[id];
    if (!s) return this.fail(`${who} accepted unknown session ${id}`);
    if (s.holder && s.hold && sessionClosedBySDK(s.hold.r)) s.hold.worker.dropHold(s.hold);
    if (s.holder) return this.fail(`${who} accepted session ${id}, held by ${s.holder}`);
    s.holder = who;
    s.hold = hold;
  }

  unholdSession(id) {
    this.sessions[id].holder = null;
    this.sessions[id].hold = null;
  }

  // stranded records a copy that cannot be settled (a message with a
  // SessionId whose link the SDK closed): its lock runs out, and the drain
  // waits for that.
  stranded(copy) {
    this.count("copies stranded by a link the SDK closed");
    this.strandedUntil = Math.max(this.strandedUntil, copy.lockedUntil());
    this.lockEnded(copy, "the SDK closed its link; the lock runs out");
  }

  // freeSessions returns the sessions nobody holds, and whether one of
  // them has an acknowledged message available.
  freeSessions() {
    const free = sessionIds.filter((id) => !this.sessions[id].holder);
    const withMessages = free.some((id) => id !== radSession && this.availableIn(id) > 0);
    return { free, withMessages };
  }

  availableIn(session) {
    return this.sessions[session].recs.filter((r) => r.acked && r.state === "available").length;
  }

  // peeked checks a page of a peek begun at ledger time since.
  peeked(who, kind, dlq, session, since, msgs, last) {
    for (const m of msgs) {
      const rec = this.recs.get(m.messageId);
      const where = `${this.queue(kind)}${dlq ? "/$DeadLetterQueue" : ""}`;
      if (!m.sequenceNumber || (last.seq && !m.sequenceNumber.greaterThan(last.seq))) {
        return this.fail(`${who} peeked ${m.messageId} in ${where} with seq ${m.sequenceNumber} after ${last.seq}`, [rec]);
      }
      last.seq = m.sequenceNumber;
      if (!rec || rec.kind !== kind) return this.fail(`${who} peeked unknown message ${m.messageId} in ${where}`);
      if (m.lockToken !== undefined) return this.fail(`${who} peeked ${rec.id} with a lock token`, [rec]);
      if (session && rec.session !== session) return this.fail(`${who} peeked ${rec.id} of session ${rec.session} in session ${session}`, [rec]);
      if (bodyKey(m.body) !== bodyKey(rec.body)) return this.fail(`${who} peeked ${rec.id} with body ${brief(m.body)}`, [rec]);
      if (!dlq && rec.leftMainAt && rec.leftMainAt < since) {
        return this.fail(`${who} peeked ${rec.id} in ${where}, which it had left before the peek (${rec.leftMainAt} < ${since})`, [rec]);
      }
      if (dlq && ((rec.leftDLQAt && rec.leftDLQAt < since) || (!rec.everDLQ && !rec.ttl && kind === "sess"))) {
        return this.fail(`${who} peeked ${rec.id} in ${where}, where it is not`, [rec]);
      }
      if (!dlq && rec.cancelledAt && rec.cancelledAt < since) {
        return this.fail(`${who} peeked ${rec.id}, whose schedule was cancelled before the peek and before its time`, [rec]);
      }
      if (!dlq && rec.far && m.state !== "scheduled") {
        return this.fail(`${who} peeked ${rec.id} in state ${m.state}; it is scheduled far ahead`, [rec]);
      }
    }
  }
}

// ---------------------------------------------------------------- workers

class HandlerError extends Error {}

// Settlements start one event-loop turn apart. rhea 3.0.5 writes the
// dispositions of one turn together and merges consecutive delivery-ids
// into one range with the first one's outcome even when the second's
// differs (it compares outcomes only once a range has two members): an
// abandon and a complete settled at once went out as one modified for both,
// and the SDK reported the complete as done. Spaced by a turn they still
// travel pipelined, each with its own disposition.
let dispositionGate = Promise.resolve();
function dispositionTurn() {
  const turn = dispositionGate;
  dispositionGate = turn.then(() => new Promise((resolve) => setImmediate(resolve)));
  return turn;
}

// The SDK closes a link itself when a drain is not answered within 200 ms
// (after a receiveMessages that waited out its time, or when a subscription
// stops), which happens on an overloaded machine however fast the broker is:
// the client's own event loop can be late. For a session receiver that ends
// the session (the broker releases it and the locks of its messages), and a
// message with a SessionId can no longer be settled at all (the SDK settles
// those only on their own link). sessionClosedBySDK tells such a close of a
// session receiver from one the broker made, which carries its error. (SDK
// internals: pinned @azure/service-bus 7.9.5.)
function sessionClosedBySDK(r) {
  if (r._isClosed || !r.isClosed) return false;
  const link = r._messageSession?.link;
  return !link?.error;
}

// linkOpen reports whether the link a message came on is still open.
const linkOpen = (m) => m.delivery?.link?.is_open?.() ?? false;

class Worker {
  constructor(ledger, name, role, index, client) {
    this.l = ledger;
    this.name = name;
    this.role = role;
    this.index = index;
    this.rng = new Rng(ledger.seed, name);
    this.c = client;
    this.senders = new Map();
    this.settlers = new Map(); // long-lived peekLock receivers by queue (and subqueue)
    this.held = []; // copies this worker holds
    this.holds = []; // session receivers: {r, id, worker}
    this.ephemeral = new Set();
    this.sessionsOwned = sessionIds.filter((_, i) => i % 2 === index);
  }

  get stopped() {
    return this.l.stopped;
  }

  // check reports an SDK error as a failure (unless the run already failed).
  check(err, what, recs = []) {
    if (!this.stopped) this.l.fail(`${this.name}: ${what}: ${errText(err)}${err?.stack ? `\n${err.stack.split("\n").slice(1, 4).join("\n")}` : ""}`, recs);
  }

  sender(kind) {
    let s = this.senders.get(kind);
    if (!s) this.senders.set(kind, (s = this.c.createSender(this.l.queue(kind))));
    return s;
  }

  settler(kind, dlq = false) {
    const key = `${kind}${dlq ? "/dlq" : ""}`;
    let r = this.settlers.get(key);
    if (!r) {
      r = this.c.createReceiver(this.l.queue(kind), {
        subQueueType: dlq ? "deadLetter" : undefined,
        maxAutoLockRenewalDurationInMs: 0,
      });
      this.settlers.set(key, r);
    }
    return r;
  }

  ephemeralReceiver(kind, opts) {
    const r = this.c.createReceiver(this.l.queue(kind), opts);
    this.ephemeral.add(r);
    return r;
  }

  async closeEphemeral(r) {
    this.ephemeral.delete(r);
    await r.close();
  }

  async run() {
    for (let i = 0; i < steps && !this.stopped; i++) {
      try {
        await this.step();
      } catch (err) {
        this.check(err, "step");
      }
    }
    try {
      await this.finish();
    } catch (err) {
      this.check(err, "finish");
    }
  }

  // The operations of each role, with their weights.
  static ops = {
    sender: [
      [24, "sendOne"], [14, "sendArray"], [14, "sendBatch"], [8, "sendDuplicate"],
      [8, "scheduleNear"], [6, "scheduleFar"], [6, "cancelSome"], [12, "sendTTL"],
    ],
    receiver: [
      [22, "receive"], [26, "settleOne"], [4, "settleAll"], [8, "receiveDeferred"], [8, "receiveDLQ"],
      [6, "receiveAndDelete"], [6, "closeWhileReceiving"], [5, "iterate"], [6, "peek"], [3, "receiveGone"],
      [3, "recycle"], [3, "renewOne"],
    ],
    streamer: [[40, "subscribe"], [30, "settleOne"], [10, "receiveDLQ"], [10, "receiveDeferred"], [10, "peek"]],
    sessions: [
      [12, "acceptSession"], [25, "receiveSession"], [25, "settleOne"], [6, "receiveDeferredSession"],
      [8, "sessionState"], [4, "renewSession"], [6, "closeSession"], [4, "peekSession"],
      [5, "receiveAndDeleteSession"], [5, "subscribeSession"],
    ],
  };

  async step() {
    for (const hold of [...this.holds]) if (sessionClosedBySDK(hold.r)) this.dropHold(hold);
    const ops = Worker.ops[this.role];
    const op = ops[this.rng.weighted(ops.map(([w]) => w))][1];
    const started = Date.now();
    await this[op]();
    this.l.timing[op] = (this.l.timing[op] ?? 0) + Date.now() - started;
  }

  // finish settles what the worker holds, closes its sessions and cancels
  // what it scheduled far ahead.
  async finish() {
    while (this.held.length && !this.stopped) await this.settleAt(0, { kind: "complete" });
    while (this.holds.length && !this.stopped) await this.closeHold(this.holds[0]);
    if (this.role === "sender") {
      const far = this.l.order.filter((r) => this.ownsScheduled(r) && r.far && !r.cancelled);
      if (far.length) await this.cancel(far);
    }
    for (const r of [...this.ephemeral]) await this.closeEphemeral(r);
  }

  async close() {
    for (const r of this.settlers.values()) await r.close().catch(() => {});
    for (const s of this.senders.values()) await s.close().catch(() => {});
    await this.c.close().catch(() => {});
  }

  // ------------------------------------------------------------ sending

  // target picks a queue, and for the session queue one of this sender's
  // sessions: each session has one sender, so its send order is its order.
  target(list = ["plain", "dedup", "sess"]) {
    const kind = this.rng.pick(list);
    return { kind, session: kind === "sess" ? this.rng.pick(this.sessionsOwned) : null };
  }

  async send(kind, messages, recs, what) {
    try {
      await this.sender(kind).sendMessages(messages);
    } catch (err) {
      return this.check(err, `${what} of ${recs.map((r) => r.id).join(",")}`);
    }
    for (const r of recs) this.l.sent(r);
  }

  async sendOne() {
    const { kind, session } = this.target();
    if (kind !== "sess" && this.rng.chance(0.12)) {
      // Scheduled through the message's scheduledEnqueueTimeUtc.
      const at = new Date(Date.now() + 200 + this.rng.int(500));
      const rec = this.l.register(this.name, kind, { state: "scheduled", rng: this.rng });
      this.l.scheduled([rec], at, false);
      this.l.count("sent with scheduledEnqueueTimeUtc");
      return this.send(kind, { ...this.l.message(rec), scheduledEnqueueTimeUtc: at }, [rec], "send scheduled");
    }
    const large = kind !== "sess" && this.rng.chance(0.05) ? 64_000 + this.rng.int(96_000) : 0;
    if (large) this.l.count("large messages");
    const rec = this.l.register(this.name, kind, { session, large, rng: this.rng });
    return this.send(kind, this.l.message(rec), [rec], "send");
  }

  async sendArray() {
    const { kind } = this.target();
    const recs = [];
    for (let i = 0, n = 2 + this.rng.int(4); i < n; i++) {
      recs.push(this.l.register(this.name, kind, { session: this.target([kind]).session, rng: this.rng }));
    }
    const msgs = recs.map((r) => this.l.message(r));
    if (kind === "dedup" && this.rng.chance(0.3)) {
      // The same MessageId twice in one array: the second is dropped.
      const i = this.rng.int(msgs.length);
      msgs.splice(i + 1, 0, { messageId: recs[i].id, body: `duplicate in array of ${recs[i].id}` });
      this.l.count("duplicates sent");
    }
    return this.send(kind, msgs, recs, "send array");
  }

  async sendBatch() {
    const { kind } = this.target(["plain", "dedup", "sess", "ttl"]);
    let batch;
    try {
      batch = await this.sender(kind).createMessageBatch();
    } catch (err) {
      return this.check(err, "createMessageBatch");
    }
    const recs = [];
    for (let i = 0, n = 2 + this.rng.int(5); i < n; i++) {
      const ttl = kind === "ttl" && this.rng.chance(0.7) ? 300 + this.rng.int(1500) : 0;
      const rec = this.l.register(this.name, kind, { session: this.target([kind]).session, ttl, rng: this.rng });
      recs.push(rec);
      if (ttl) this.l.lastTimer = Math.max(this.l.lastTimer, Date.now() + ttl);
      if (!batch.tryAddMessage(this.l.message(rec))) return this.l.fail(`${this.name}: batch refused ${rec.id}`);
      if (kind === "dedup" && this.rng.chance(0.25)) {
        if (!batch.tryAddMessage({ messageId: rec.id, body: `duplicate in batch of ${rec.id}` })) {
          return this.l.fail(`${this.name}: batch refused a duplicate`);
        }
        this.l.count("duplicates sent");
      }
    }
    this.l.count("batches");
    return this.send(kind, batch, recs, "send batch");
  }

  // sendDuplicate sends again the MessageId of an acknowledged message of
  // the dedup queue, with another body: it must be dropped.
  async sendDuplicate() {
    const orig = this.l.order.filter((r) => r.kind === "dedup" && r.acked && !r.scheduledAt);
    if (!orig.length) return this.sendOne();
    const r = this.rng.pick(orig);
    const dup = { messageId: r.id, body: `duplicate of ${r.id}` };
    this.l.count("duplicates sent");
    if (this.rng.chance(0.5)) {
      try {
        await this.sender("dedup").sendMessages(dup);
      } catch (err) {
        this.check(err, `send duplicate of ${r.id}`);
      }
      return;
    }
    const fresh = this.l.register(this.name, "dedup", { rng: this.rng });
    const msgs = this.rng.chance(0.5) ? [dup, this.l.message(fresh)] : [this.l.message(fresh), dup];
    return this.send("dedup", msgs, [fresh], `send duplicate of ${r.id} with`);
  }

  async sendTTL() {
    const recs = [];
    for (let i = 0, n = 1 + this.rng.int(3); i < n; i++) {
      const ttl = this.rng.chance(0.8) ? 200 + this.rng.int(1500) : 0;
      recs.push(this.l.register(this.name, "ttl", { ttl, rng: this.rng }));
      if (ttl) this.l.lastTimer = Math.max(this.l.lastTimer, Date.now() + ttl);
    }
    const msgs = recs.map((r) => this.l.message(r));
    return this.send("ttl", msgs.length === 1 ? msgs[0] : msgs, recs, "send with a time to live");
  }

  async schedule(kind, session, n, at, far) {
    const recs = [];
    for (let i = 0; i < n; i++) recs.push(this.l.register(this.name, kind, { session, ordered: false, state: "scheduled", rng: this.rng }));
    this.l.scheduled(recs, at, far);
    let seqs;
    try {
      seqs = await this.sender(kind).scheduleMessages(recs.map((r) => this.l.message(r)), at);
    } catch (err) {
      this.check(err, `schedule ${recs.map((r) => r.id)}`);
      return [];
    }
    if (seqs.length !== n) {
      this.l.fail(`${this.name}: scheduling ${n} messages gave ${seqs.length} sequence numbers`, recs);
      return [];
    }
    recs.forEach((r, i) => this.l.sent(r, seqs[i]));
    return recs;
  }

  // scheduleNear schedules a few hundred ms ahead and now and then cancels
  // one at once: answered before the message's time, that cancel means it
  // never arrives (a later cancel may lose the race to the activation).
  async scheduleNear() {
    const { kind, session } = this.target();
    const recs = await this.schedule(kind, session, 1 + this.rng.int(3), new Date(Date.now() + 200 + this.rng.int(500)), false);
    if (recs.length && this.rng.chance(0.25)) await this.cancel(recs.slice(0, 1));
  }

  // scheduleFar schedules beyond the end of the run: all of those are
  // cancelled, now or at the end, and must never arrive.
  async scheduleFar() {
    const { kind, session } = this.target();
    const recs = await this.schedule(kind, session, 1 + this.rng.int(3), new Date(Date.now() + 600_000), true);
    if (recs.length && this.rng.chance(0.5)) await this.cancel(recs);
  }

  ownsScheduled(r) {
    return r.by === this.name && r.schedSeq && r.acked;
  }

  async cancelSome() {
    const recs = this.l.order.filter((r) => this.ownsScheduled(r) && r.state === "scheduled" && !r.cancelled);
    if (!recs.length) return this.scheduleFar();
    const pickN = 1 + this.rng.int(recs.length);
    const chosen = [];
    while (chosen.length < pickN) chosen.push(recs.splice(this.rng.int(recs.length), 1)[0]);
    return this.cancel(chosen);
  }

  async cancel(recs) {
    this.l.cancelling(recs);
    const byKind = new Map();
    for (const r of recs) byKind.set(r.kind, [...(byKind.get(r.kind) ?? []), r.schedSeq]);
    for (const [kind, seqs] of byKind) {
      try {
        await this.sender(kind).cancelScheduledMessages(seqs.length === 1 ? seqs[0] : seqs);
      } catch (err) {
        return this.check(err, `cancel ${seqs} in ${kind}`);
      }
    }
    this.l.cancelled(recs);
  }

  // ------------------------------------------------------------ receiving

  // record passes received messages to the ledger and keeps the locked ones.
  record(kind, where, mode, msgs, hold = null) {
    for (const m of msgs) {
      const copy = this.l.received(this.name, kind, where, mode, m, hold);
      if (copy) this.held.push(copy);
    }
  }

  async receiveFrom(r, n, waitMs, what, hold = null) {
    let msgs;
    try {
      msgs = await r.receiveMessages(n, { maxWaitTimeInMs: waitMs });
    } catch (err) {
      if (hold) this.holdFailed(hold, err, what);
      else this.check(err, what);
      return [];
    }
    if (msgs.length > n) this.l.fail(`${this.name}: ${what}: asked for ${n}, got ${msgs.length}`);
    return msgs;
  }

  async receive() {
    const kind = this.rng.pick(plainKinds);
    const n = 1 + this.rng.int(5);
    this.record(kind, "main", "lock", await this.receiveFrom(this.settler(kind), n, 30 + this.rng.int(200), `receive ${n} from ${kind}`));
  }

  async receiveDLQ() {
    const kind = this.rng.pick(["plain", "dedup", "ttl", "sess"]);
    const n = 1 + this.rng.int(3);
    this.record(kind, "dlq", "lock", await this.receiveFrom(this.settler(kind, true), n, 30 + this.rng.int(150), `receive ${n} from ${kind} DLQ`));
  }

  // outcome draws a settlement for a held copy.
  outcome(copy, rng = this.rng) {
    const abandon = copy.rec.failed > 0 ? 80 : 25;
    const k = rng.weighted([40, abandon, 15, 15]);
    const o = { kind: ["complete", "abandon", "defer", "deadletter"][k] };
    if (copy.where === "dlq" && o.kind !== "complete") o.kind = "abandon";
    if (o.kind === "deadletter") {
      o.reason = `reason-${rng.int(100)}`;
      o.description = `description ${rng.int(100)}`;
    }
    if (o.kind !== "complete" && rng.chance(0.5)) o.props = { [`p${rng.int(4)}`]: rng.int(1000) };
    return o;
  }

  // settlerFor is the receiver to settle a copy through: its session
  // receiver, or this worker's receiver of the queue (the SDK settles by
  // lock token through $management when the message's own link is gone).
  settlerFor(copy) {
    return copy.hold ? copy.hold.r : this.settler(copy.kind, copy.where === "dlq");
  }

  async settleAt(i, o) {
    const [copy] = this.held.splice(i, 1);
    return this.settle(copy, o, this.settlerFor(copy));
  }

  // settle settles a copy through r (or the receiver r() names once it is
  // this settlement's turn).
  async settle(copy, o, r) {
    await dispositionTurn();
    if (typeof r === "function") r = r();
    if (copy.hold && sessionClosedBySDK(copy.hold.r)) return copy.hold.worker.dropHold(copy.hold, [copy]);
    if (copy.msg.sessionId && !copy.hold && !linkOpen(copy.msg)) {
      // A session's message from the dead-letter queue, whose link the
      // SDK closed: no one can settle it now.
      if (copy.msg.delivery.link.error) return this.l.fail(`${this.name}: the broker detached the link of ${copy.rec.id}: ${JSON.stringify(copy.msg.delivery.link.error)}`, [copy.rec]);
      return this.l.stranded(copy);
    }
    this.l.settling(copy, o);
    const askedAt = Date.now();
    let err = null;
    try {
      switch (o.kind) {
        case "complete":
          await r.completeMessage(copy.msg);
          break;
        case "abandon":
          await r.abandonMessage(copy.msg, o.props);
          break;
        case "defer":
          await r.deferMessage(copy.msg, o.props);
          break;
        case "deadletter":
          await r.deadLetterMessage(copy.msg, { deadLetterReason: o.reason, deadLetterErrorDescription: o.description, ...o.props });
          break;
      }
    } catch (e) {
      err = e;
    }
    this.l.settled(copy, o, err, askedAt);
  }

  async settleOne() {
    if (!this.held.length) return;
    const i = this.rng.int(this.held.length);
    return this.settleAt(i, this.outcome(this.held[i]));
  }

  // settleAll settles everything held at once: dispositions and $management
  // requests pipelined on the same links.
  async settleAll() {
    const copies = this.held.splice(0);
    this.l.count("settled concurrently", copies.length);
    await Promise.all(copies.map((c) => this.settle(c, this.outcome(c), this.settlerFor(c))));
  }

  async renewOne() {
    const copies = this.held.filter((c) => !c.hold);
    if (!copies.length) return;
    const copy = this.rng.pick(copies);
    const before = copy.lockedUntil();
    const askedAt = Date.now();
    let err = null;
    try {
      const until = await this.settlerFor(copy).renewMessageLock(copy.msg);
      if (until.getTime() !== copy.lockedUntil()) this.l.fail(`${this.name}: renewMessageLock returned ${until.getTime()}, the message says ${copy.lockedUntil()}`, [copy.rec]);
    } catch (e) {
      err = e;
    }
    this.l.count("renewMessageLock");
    this.l.renewed(copy, before, err, askedAt);
  }

  // receiveDeferred receives deferred messages by SequenceNumber, locked
  // or (now and then) received and deleted.
  async receiveDeferred() {
    const claimed = this.l.claimDeferred(this.rng, this.name, 1 + this.rng.int(3), (r) => r.kind !== "sess");
    if (!claimed.length) return;
    const byKind = new Map();
    for (const r of claimed) byKind.set(r.kind, [...(byKind.get(r.kind) ?? []), r]);
    for (const [kind, recs] of byKind) {
      const rad = this.rng.chance(0.25);
      const r = rad ? this.ephemeralReceiver(kind, { receiveMode: "receiveAndDelete" }) : this.settler(kind);
      let msgs;
      try {
        msgs = await r.receiveDeferredMessages(recs.map((x) => x.seq));
      } catch (err) {
        this.l.unclaim(recs, this.name);
        return this.check(err, `receive deferred ${recs.map((x) => `${x.id}@${x.seq}`)}`, recs);
      } finally {
        if (rad) await this.closeEphemeral(r);
      }
      this.gotDeferred(kind, recs, msgs, rad ? "rad" : "lock");
    }
  }

  gotDeferred(kind, recs, msgs, mode, hold = null) {
    const want = new Set(recs.map((r) => r.id));
    if (msgs.length !== recs.length || !msgs.every((m) => want.has(m.messageId))) {
      this.l.fail(`${this.name}: asked for deferred ${[...want]}, got ${msgs.map((m) => m.messageId)}`, recs);
      return;
    }
    for (const m of msgs) {
      const copy = this.l.received(this.name, kind, "deferred", mode, m, hold);
      if (copy) this.held.push(copy);
    }
    this.l.count(`received deferred ${mode}`, msgs.length);
  }

  // receiveGone asks for a message that left for good by its number: the
  // broker must not find it.
  async receiveGone() {
    const gone = this.l.order.filter((r) => r.kind !== "sess" && r.state === "done" && r.seq && r.completions === 1);
    if (!gone.length) return this.receiveDeferred();
    const rec = this.rng.pick(gone);
    this.l.count("gone by SequenceNumber");
    try {
      const msgs = await this.settler(rec.kind).receiveDeferredMessages(rec.seq);
      this.l.fail(`${this.name}: receiving ${rec.id} (gone) by SequenceNumber ${rec.seq} gave ${msgs.map((m) => m.messageId)}`, [rec]);
    } catch (err) {
      if (err.code !== "MessageNotFound") this.check(err, `receive gone ${rec.id} by SequenceNumber ${rec.seq}`);
    }
  }

  // receiveAndDelete receives a few times with a receive-and-delete
  // receiver, sometimes while a burst of messages arrives, sometimes
  // closing it while a receive is under way, and records all it returned.
  async receiveAndDelete() {
    const kind = this.rng.pick(plainKinds);
    const dlq = this.rng.chance(0.25);
    const r = this.ephemeralReceiver(kind, { receiveMode: "receiveAndDelete", subQueueType: dlq ? "deadLetter" : undefined });
    const where = dlq ? "dlq" : "main";
    const bursts = [];
    for (let i = 0, n = 1 + this.rng.int(3); i < n && !this.stopped; i++) {
      if (i === 1 && !dlq && this.rng.chance(0.5)) bursts.push(this.burst(kind, 3 + this.rng.int(8)));
      const want = 1 + this.rng.int(6);
      if (i === n - 1 && this.rng.chance(0.4)) {
        // Close while this receive waits: what reached the link before the
        // detach is returned; what the broker held for credit stays.
        this.l.count("receive-and-delete closed while receiving");
        const pending = r.receiveMessages(want, { maxWaitTimeInMs: 300 + this.rng.int(300) });
        await sleep(this.rng.int(30));
        this.ephemeral.delete(r);
        const closing = r.close();
        this.record(kind, where, "rad", await this.settleReceive(pending, want, `receive-and-delete ${kind} closed while receiving`));
        await closing;
        break;
      }
      this.record(kind, where, "rad", await this.receiveFrom(r, want, 20 + this.rng.int(150), `receive-and-delete ${want} from ${kind}`));
    }
    await Promise.all(bursts);
    if (this.ephemeral.has(r)) await this.closeEphemeral(r);
  }

  // settleReceive awaits a receive whose receiver is being closed: it
  // returns what arrived, or the SDK's error for a link closed before it
  // was made (nothing can have arrived then).
  async settleReceive(pending, n, what) {
    try {
      const msgs = await pending;
      if (msgs.length > n) this.l.fail(`${this.name}: ${what}: asked for ${n}, got ${msgs.length}`);
      return msgs;
    } catch (err) {
      if (err.code === "GeneralError" && /Link closed before receiving messages/.test(err.message)) {
        this.l.count("closed before the link was made");
        return [];
      }
      this.check(err, what);
      return [];
    }
  }

  // burst sends n messages in one batch on a sender of its own.
  async burst(kind, n) {
    const s = this.c.createSender(this.l.queue(kind));
    const recs = [];
    try {
      const batch = await s.createMessageBatch();
      for (let i = 0; i < n; i++) {
        const rec = this.l.register(`${this.name}-burst`, kind, { rng: this.rng });
        recs.push(rec);
        if (!batch.tryAddMessage(this.l.message(rec))) return this.l.fail("burst: batch refused a message");
      }
      await s.sendMessages(batch);
      for (const r of recs) this.l.sent(r);
      this.l.count("burst messages", n);
    } catch (err) {
      this.check(err, `burst of ${n} to ${kind}`);
    } finally {
      await s.close();
    }
  }

  // closeWhileReceiving closes a peekLock receiver while its receive waits:
  // what it returns is settled later by lock token.
  async closeWhileReceiving() {
    const kind = this.rng.pick(plainKinds);
    const dlq = this.rng.chance(0.2);
    const r = this.c.createReceiver(this.l.queue(kind), {
      subQueueType: dlq ? "deadLetter" : undefined,
      maxAutoLockRenewalDurationInMs: this.rng.chance(0.5) ? 0 : undefined,
    });
    const n = 1 + this.rng.int(10);
    if (this.rng.chance(0.5)) await this.receiveFrom(r, 1, 10, "receive nothing on a new receiver").then((m) => this.record(kind, dlq ? "dlq" : "main", "lock", m));
    const pending = r.receiveMessages(n, { maxWaitTimeInMs: 300 + this.rng.int(300) });
    await sleep(this.rng.int(40));
    const closing = r.close();
    this.l.count("peekLock closed while receiving");
    this.record(kind, dlq ? "dlq" : "main", "lock", await this.settleReceive(pending, n, `receive ${n} from ${kind} while closing`));
    await closing;
  }

  // iterate takes a few messages from getMessageIterator; an abort ends the
  // wait when there are fewer. A receive the abort cuts short drops what it
  // had (those locks run out unseen), so the receiver is closed after.
  async iterate() {
    const kind = this.rng.pick(plainKinds);
    const r = this.ephemeralReceiver(kind, { maxAutoLockRenewalDurationInMs: 0 });
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), 200 + this.rng.int(300));
    const want = 1 + this.rng.int(4);
    let got = 0;
    try {
      for await (const m of r.getMessageIterator({ maxWaitTimeInMs: 200, abortSignal: abort.signal })) {
        this.record(kind, "main", "lock", [m]);
        if (++got >= want || this.stopped) break;
      }
    } catch (err) {
      if (err.name !== "AbortError") this.check(err, `iterate ${kind}`);
      else this.l.count("iterator aborted");
    } finally {
      clearTimeout(timer);
    }
    this.l.count("iterated", got);
    await this.closeEphemeral(r);
  }

  async peek() {
    const kind = this.rng.pick(["plain", "dedup", "ttl", "sess"]);
    const dlq = kind === "sess" || this.rng.chance(0.3);
    return this.peekPages(this.settler(kind, dlq), kind, dlq, null);
  }

  async peekPages(r, kind, dlq, session, hold = null) {
    const since = this.l.clock;
    const page = 1 + this.rng.int(6);
    const last = { seq: null };
    let from = Long.fromNumber(1);
    for (let i = 0; i < 30 && !this.stopped; i++) {
      let msgs;
      try {
        msgs = await r.peekMessages(page, { fromSequenceNumber: from });
      } catch (err) {
        if (hold) return this.holdFailed(hold, err, `peek session ${session} from ${from}`);
        return this.check(err, `peek ${kind}${dlq ? " DLQ" : ""} from ${from}`);
      }
      if (msgs.length > page) return this.l.fail(`${this.name}: peek of ${page} gave ${msgs.length}`);
      this.l.count("peeked", msgs.length);
      this.l.peeked(this.name, kind, dlq, session, since, msgs, last);
      if (msgs.length < page) return;
      from = msgs.at(-1).sequenceNumber.add(1);
    }
  }

  // recycle closes a receiver of this worker between calls (its link has
  // no credit left then) and makes a new one; what the old one held is
  // settled through the new one.
  async recycle() {
    // The SDK settles a message that has a SessionId only through the link
    // it came on (a session's dead-lettered messages keep theirs): the
    // session queue's dead-letter receiver stays while it holds some.
    const keys = [...this.settlers.keys()].filter((k) => k !== "sess/dlq" || !this.held.some((c) => c.kind === "sess" && c.where === "dlq"));
    if (!keys.length) return;
    const key = this.rng.pick(keys);
    const r = this.settlers.get(key);
    this.settlers.delete(key);
    await r.close();
    this.l.count("receivers recycled");
  }

  // subscribe streams from a queue or its dead-letter queue with a handler
  // for a while, then stops: the subscription alone (its link stays open)
  // or the whole receiver. Messages still held are settled later.
  async subscribe() {
    const kind = this.rng.pick(plainKinds);
    const dlq = this.rng.chance(0.2);
    const where = dlq ? "dlq" : "main";
    const rad = this.rng.chance(0.25);
    const autoComplete = !rad && this.rng.chance(0.5);
    const maxConcurrentCalls = 1 + this.rng.int(4);
    const r = this.ephemeralReceiver(kind, {
      receiveMode: rad ? "receiveAndDelete" : "peekLock",
      subQueueType: dlq ? "deadLetter" : undefined,
      maxAutoLockRenewalDurationInMs: this.rng.chance(0.5) ? 0 : undefined,
    });
    const seed = this.rng.int(2 ** 31);
    const running = new Set();
    const auto = []; // messages the SDK settles after their handler
    const handle = async (m) => {
      if (rad) return this.record(kind, where, "rad", [m]);
      const copy = this.l.received(this.name, kind, where, "lock", m);
      if (!copy) return;
      // Decisions per delivery, so that they do not depend on the order
      // in which concurrent handlers run.
      const rng = new Rng(seed, m.messageId, copy.rec.deliveries);
      if (autoComplete) {
        // The SDK abandons a message whose handler throws, and completes the
        // others; only one call at a time throws, so that no abandon and
        // complete go out in the same turn (see dispositionTurn).
        auto.push(m);
        if (maxConcurrentCalls === 1 && rng.chance(0.2)) {
          // (Taken as answered now, as the auto-complete below.)
          this.l.settling(copy, { kind: "abandon" });
          this.l.settled(copy, { kind: "abandon" }, null, Date.now());
          this.l.count("abandoned by a throwing handler");
          throw new HandlerError(`handler throws for ${m.messageId}`);
        }
        // The SDK completes it after the handler returns; an error doing
        // so goes to processError, which fails the run.
        // (The ledger takes it as done now; when the SDK's answer comes is
        // not known, so peeks are not checked against it.)
        this.l.settling(copy, { kind: "complete", auto: true });
        this.l.settled(copy, { kind: "complete", auto: true }, null, Date.now());
        this.l.count("auto-completed");
        return;
      }
      if (rng.chance(0.4)) {
        this.held.push(copy);
        return;
      }
      // Through the subscribing receiver while it is open, else by lock token.
      await this.settle(copy, this.outcome(copy, rng), () => (closed ? this.settlerFor(copy) : r));
    };
    let closed = false;
    let subscription;
    // The SDK makes the link after subscribe() returns and adds credit once
    // postInitialize has run: a receiver closed before that fails in the
    // SDK itself (no link to credit), so the stop waits for it.
    let initialized;
    const ready = new Promise((resolve) => (initialized = resolve));
    try {
      subscription = r.subscribe(
        {
          processMessage: (m) => {
            const p = handle(m);
            running.add(p);
            return p.finally(() => running.delete(p));
          },
          processError: async (args) => {
            if (args.error instanceof HandlerError || (args.errorSource === "processMessageCallback" && /handler throws/.test(args.error?.message))) return;
            initialized();
            this.check(args.error, `subscribe ${kind}${dlq ? " DLQ" : ""} (${args.errorSource})`);
          },
          postInitialize: async () => {
            setImmediate(initialized);
          },
        },
        { autoCompleteMessages: autoComplete, maxConcurrentCalls },
      );
    } catch (err) {
      return this.check(err, "subscribe");
    }
    await ready;
    this.l.count(`subscribe ${rad ? "rad" : autoComplete ? "auto-complete" : "peekLock"}`);
    // Let it run for a while: sends and settlements of the other workers
    // go on meanwhile.
    for (let i = 0, n = 1 + this.rng.int(3); i < n && !this.stopped; i++) await sleep(30 + this.rng.int(150));
    if (this.rng.chance(0.5)) {
      // Stop the subscription (the SDK drains the link and keeps it), let
      // the handlers and the SDK's own settlements finish, then close.
      await subscription.close();
      await this.quiesce(running, auto, "subscription");
      closed = true;
      await this.closeEphemeral(r);
      this.l.count("subscriptions stopped");
    } else {
      // Close the receiver under the subscription: messages may be on
      // their way, handlers running.
      closed = true;
      await this.closeEphemeral(r);
      await this.quiesce(running, [], "subscription");
      this.l.count("subscribing receivers closed");
    }
  }

  // quiesce waits until no handler runs and the SDK has its answers to the
  // settlements it makes after a handler (auto-complete, or the abandon of
  // a handler that threw) on a link that stays open meanwhile, so that the
  // link can be closed with nothing of the SDK's own still under way.
  async quiesce(running, auto, what) {
    const deadline = Date.now() + 15_000;
    for (;;) {
      while (running.size) await Promise.allSettled([...running]);
      // (Once the link is closed the SDK settles by lock token instead.)
      const owed = () => auto.filter((m) => !m.delivery.remote_settled && linkOpen(m));
      while (owed().length && !this.stopped) {
        if (Date.now() > deadline) {
          const ids = owed().map((m) => m.messageId);
          return this.l.fail(`${this.name}: the SDK did not settle ${ids} after their handlers (${what})`, ids.map((id) => this.l.recs.get(id)));
        }
        await sleep(10);
      }
      // The SDK's continuation after the handler (adding credit) runs now.
      await new Promise((resolve) => setImmediate(resolve));
      if (!running.size) return;
    }
  }

  // ------------------------------------------------------------ sessions

  async acceptSession() {
    if (this.holds.length >= 2) return this.receiveSession();
    return this.l.withAccepts(async () => {
      const { free, withMessages } = this.l.freeSessions();
      if (!free.length || this.stopped) return;
      let sr;
      try {
        if (withMessages && this.rng.chance(0.5)) {
          // A free session has messages: accept-next must find one at once.
          this.l.count("acceptNextSession");
          sr = await this.c.acceptNextSession(this.l.queue("sess"));
        } else {
          const id = this.rng.pick(free);
          sr = await this.c.acceptSession(this.l.queue("sess"), id);
        }
      } catch (err) {
        return this.check(err, "accept a session");
      }
      const hold = { r: sr, id: sr.sessionId, worker: this };
      this.l.holdSession(sr.sessionId, this.name, hold);
      this.holds.push(hold);
      await this.checkState(hold);
    });
  }

  async checkState(hold) {
    let state;
    try {
      state = await hold.r.getSessionState();
    } catch (err) {
      return this.holdFailed(hold, err, `get state of ${hold.id}`);
    }
    const want = this.l.sessions[hold.id].state;
    if (stateKey(state) !== stateKey(want)) this.l.fail(`${this.name}: session ${hold.id} has state ${stateKey(state)}, set to ${stateKey(want)}`);
  }

  // receiveSession receives from a held session: all of a few available
  // messages, or (none available) whatever comes within a short wait.
  async receiveSession() {
    if (!this.holds.length) return this.acceptSession();
    const hold = this.rng.pick(this.holds);
    let avail = this.l.availableIn(hold.id);
    if (hold.id === radSession && this.role !== "drain") avail = 0; // some may be on their way back
    if (!avail) {
      return this.record("sess", "main", "lock", await this.receiveFrom(hold.r, 1 + this.rng.int(2), 50, `receive from session ${hold.id}`, hold), hold);
    }
    // At most what is there, with a long wait: the receive ends when they
    // are in, leaving the drain that follows its remaining time.
    const n = 1 + this.rng.int(Math.min(avail, 4));
    let got = 0;
    while (got < n && !this.stopped && this.holds.includes(hold)) {
      const msgs = await this.receiveFrom(hold.r, n - got, 5_000, `receive ${n - got} from session ${hold.id}`, hold);
      if (!msgs.length) {
        if (sessionClosedBySDK(hold.r)) return this.dropHold(hold);
        if (!this.stopped && this.holds.includes(hold)) this.l.fail(`${this.name}: session ${hold.id} has ${avail} messages available; a receive of ${n} gave ${got}`);
        return;
      }
      got += msgs.length;
      this.record("sess", "main", "lock", msgs, hold);
    }
  }

  async receiveDeferredSession() {
    if (!this.holds.length) return;
    const hold = this.rng.pick(this.holds);
    const recs = this.l.claimDeferred(this.rng, this.name, 1 + this.rng.int(2), (r) => r.kind === "sess" && r.session === hold.id);
    if (!recs.length) return;
    let msgs;
    try {
      msgs = await hold.r.receiveDeferredMessages(recs.map((r) => r.seq));
    } catch (err) {
      this.l.unclaim(recs, this.name);
      return this.holdFailed(hold, err, `receive deferred in ${hold.id}`, recs);
    }
    this.gotDeferred("sess", recs, msgs, "lock", hold);
  }

  async sessionState() {
    if (!this.holds.length) return;
    const hold = this.rng.pick(this.holds);
    if (this.rng.chance(0.35)) return this.checkState(hold);
    const k = this.rng.int(3);
    const state =
      k === 0 ? `${hold.id}@${this.rng.int(1000)}` : k === 1 ? { session: hold.id, step: this.rng.int(1000) } : Buffer.from(`${hold.id}:${this.rng.int(1000)}`);
    this.l.sessions[hold.id].state = state;
    this.l.count("session state set");
    try {
      await hold.r.setSessionState(state);
    } catch (err) {
      this.holdFailed(hold, err, `set state of ${hold.id}`);
    }
  }

  async renewSession() {
    if (!this.holds.length) return;
    const hold = this.rng.pick(this.holds);
    const before = hold.r.sessionLockedUntilUtc.getTime();
    try {
      const until = await hold.r.renewSessionLock();
      if (until.getTime() < before) this.l.fail(`${this.name}: renewing session ${hold.id} moved its lock back from ${before} to ${until.getTime()}`);
    } catch (err) {
      this.holdFailed(hold, err, `renew session ${hold.id}`);
    }
    this.l.count("renewSessionLock");
  }

  async closeSession() {
    if (this.holds.length) return this.closeHold(this.rng.pick(this.holds));
  }

  // closeHold closes a session receiver: the broker releases the session
  // and the locks of what it holds, without counting a delivery.
  closeHold(hold) {
    return this.l.withAccepts(async () => {
      const i = this.holds.indexOf(hold);
      if (i < 0) return; // the SDK closed it
      this.holds.splice(i, 1);
      const released = this.held.filter((c) => c.hold === hold);
      this.held = this.held.filter((c) => c.hold !== hold);
      this.l.released(released, this.name);
      this.l.count("released by a session close", released.length);
      try {
        await hold.r.close();
      } catch (err) {
        return this.check(err, `close session ${hold.id}`);
      }
      this.l.unholdSession(hold.id);
    });
  }

  // dropHold lets go of a session receiver the SDK closed (see
  // sessionClosedBySDK): the broker released the session and the locks of
  // its messages, as when it is closed.
  dropHold(hold, extra = []) {
    const released = [...extra, ...this.held.filter((c) => c.hold === hold)];
    this.held = this.held.filter((c) => c.hold !== hold);
    this.l.released(released, this.name);
    const i = this.holds.indexOf(hold);
    if (i >= 0) {
      this.holds.splice(i, 1);
      this.l.count("session receivers the SDK closed");
    }
    if (this.l.sessions[hold.id].hold === hold) this.l.unholdSession(hold.id);
  }

  // holdFailed reports an error of an operation on a held session, unless
  // the SDK closed the session's link itself: then it lets the session go.
  holdFailed(hold, err, what, recs = []) {
    if (sessionClosedBySDK(hold.r)) return this.dropHold(hold);
    this.check(err, what, recs);
  }

  // receiveAndDeleteSession accepts radSession for a receive-and-delete
  // receiver, receives a few times (now and then while a burst arrives, or
  // closing it while a receive waits) and closes it.
  receiveAndDeleteSession() {
    return this.l.withAccepts(async () => {
      if (!this.l.freeSessions().free.includes(radSession) || this.stopped) return;
      let sr;
      try {
        sr = await this.c.acceptSession(this.l.queue("sess"), radSession, { receiveMode: "receiveAndDelete" });
      } catch (err) {
        return this.check(err, `accept ${radSession} to receive and delete`);
      }
      const hold = { r: sr, id: radSession, worker: this };
      this.l.holdSession(radSession, this.name, hold);
      this.l.count("receive-and-delete sessions");
      const bursts = [];
      let closing = null;
      for (let i = 0, n = 1 + this.rng.int(3); i < n && !this.stopped && !sessionClosedBySDK(sr); i++) {
        if (i === 1 && this.rng.chance(0.4)) bursts.push(this.sessionBurst(radSession, 2 + this.rng.int(5)));
        const want = 1 + this.rng.int(5);
        if (i === n - 1 && this.rng.chance(0.4)) {
          this.l.count("receive-and-delete session closed while receiving");
          const pending = sr.receiveMessages(want, { maxWaitTimeInMs: 300 + this.rng.int(300) });
          await sleep(this.rng.int(30));
          closing = sr.close();
          this.record("sess", "main", "rad", await this.settleReceive(pending, want, `receive-and-delete ${radSession} closed while receiving`));
          break;
        }
        this.record("sess", "main", "rad", await this.receiveFrom(sr, want, 20 + this.rng.int(150), `receive-and-delete from ${radSession}`, hold));
      }
      await Promise.all(bursts);
      if (sessionClosedBySDK(sr)) this.dropHold(hold);
      try {
        await (closing ?? sr.close());
      } catch (err) {
        return this.check(err, `close ${radSession}`);
      }
      if (this.l.sessions[radSession].hold === hold) this.l.unholdSession(radSession);
    });
  }

  // sessionBurst sends to a session from another sender than its owner:
  // only radSession, whose order is not checked.
  async sessionBurst(session, n) {
    const s = this.c.createSender(this.l.queue("sess"));
    const recs = [];
    for (let i = 0; i < n; i++) recs.push(this.l.register(`${this.name}-burst`, "sess", { session, rng: this.rng }));
    try {
      await s.sendMessages(recs.map((r) => this.l.message(r)));
      for (const r of recs) this.l.sent(r);
    } catch (err) {
      this.check(err, `burst to ${session}`);
    } finally {
      await s.close();
    }
  }

  async peekSession() {
    if (!this.holds.length) return;
    const hold = this.rng.pick(this.holds);
    return this.peekPages(hold.r, "sess", false, hold.id, hold);
  }

  // subscribeSession streams a held session with a handler for a while,
  // then stops the subscription and closes the session receiver (what the
  // handler kept is released). Its handler settles itself: auto-complete
  // is left to subscribe() on the plain queues, where a complete the SDK
  // makes after its session link closed under it cannot strand.
  async subscribeSession() {
    const candidates = this.holds.filter((h) => h.id !== radSession);
    if (!candidates.length) return this.acceptSession();
    const hold = this.rng.pick(candidates);
    const seed = this.rng.int(2 ** 31);
    const running = new Set();
    const handle = async (m) => {
      const copy = this.l.received(this.name, "sess", "main", "lock", m, hold);
      if (!copy) return;
      const rng = new Rng(seed, m.messageId, copy.rec.deliveries);
      if (rng.chance(0.4)) {
        this.held.push(copy);
        return;
      }
      await this.settle(copy, this.outcome(copy, rng), hold.r);
    };
    let subscription;
    try {
      subscription = hold.r.subscribe(
        {
          processMessage: (m) => {
            const p = handle(m);
            running.add(p);
            return p.finally(() => running.delete(p));
          },
          processError: async (args) => {
            if (!sessionClosedBySDK(hold.r)) this.check(args.error, `subscribe session ${hold.id} (${args.errorSource})`);
          },
        },
        { autoCompleteMessages: false },
      );
    } catch (err) {
      return this.holdFailed(hold, err, `subscribe session ${hold.id}`);
    }
    this.l.count("session subscriptions");
    for (let i = 0, n = 1 + this.rng.int(3); i < n && !this.stopped; i++) await sleep(50 + this.rng.int(150));
    await subscription.close();
    await this.quiesce(running, [], `session ${hold.id} subscription`);
    // The session receiver has streamed: it cannot receive in batches any
    // more, so it is closed (what it held is released).
    if (sessionClosedBySDK(hold.r)) return this.dropHold(hold);
    await this.closeHold(hold);
  }
}

// ---------------------------------------------------------------- the end

// checkQuiet waits until the broker's timers have run (near schedules,
// TTLs, the locks of copies no link could settle) and then compares what
// the queues hold, by peeking, with the ledger.
async function checkQuiet(l, d) {
  const wait = Math.max(l.lastTimer, l.strandedUntil) - Date.now();
  if (wait > 0) await sleep(wait);
  const deadline = Date.now() + lockMs + 5_000;
  for (;;) {
    const diff = await quietDiff(l, d);
    if (l.stopped) return;
    if (!diff.length) return;
    if (Date.now() > deadline) {
      const recs = diff.flatMap((x) => x.split(" ").map((w) => l.recs.get(w)).filter(Boolean));
      return l.fail(`once quiet, the queues differ from the ledger:\n  ${diff.join("\n  ")}`, [...new Set(recs)]);
    }
    await sleep(200);
  }
}

async function peekAll(r) {
  const all = [];
  let from = Long.fromNumber(1);
  for (;;) {
    const msgs = await r.peekMessages(50, { fromSequenceNumber: from });
    all.push(...msgs);
    if (msgs.length < 50) return all;
    from = msgs.at(-1).sequenceNumber.add(1);
  }
}

async function quietDiff(l, d) {
  const diff = [];
  const now = Date.now();
  for (const kind of Object.keys(kinds)) {
    for (const dlq of [false, true]) {
      const r = d.settler(kind, dlq);
      const since = l.clock;
      let msgs;
      try {
        msgs = await peekAll(r);
      } catch (err) {
        d.check(err, `peek ${kind}`);
        return [];
      }
      l.peeked("quiet check", kind, dlq, null, since, msgs, { seq: null });
      if (l.stopped) return [];
      const seen = new Set();
      for (const m of msgs) {
        const rec = l.recs.get(m.messageId);
        if (seen.has(rec.id)) diff.push(`${rec.id} shown twice`);
        seen.add(rec.id);
        const ghostly = kind !== "sess" && m.deliveryCount > rec.failed && now >= rec.availableSince + (m.deliveryCount - rec.failed) * lockMs;
        if (m.deliveryCount !== rec.failed && !ghostly) diff.push(`${rec.id} DeliveryCount ${m.deliveryCount}, ledger ${rec.failed}`);
        for (const [k, v] of Object.entries(rec.props)) {
          if (m.applicationProperties?.[k] !== v) diff.push(`${rec.id} property ${k}=${m.applicationProperties?.[k]}, set to ${v}`);
        }
        if (dlq) {
          const ok =
            (rec.state === "dlq" && m.deadLetterReason === rec.dl.reason) ||
            (rec.state === "available" && rec.ttl && m.deadLetterReason === reasonTTL) ||
            (rec.state === "available" && ghostly && m.deadLetterReason === reasonMax);
          if (!ok) diff.push(`${rec.id} in the dead-letter queue (${m.deadLetterReason}), ledger ${rec.state}`);
          continue;
        }
        const want = rec.state === "deferred" ? "deferred" : "active";
        // A cancelled near schedule may have lost the race to its activation.
        const ok = (rec.state === "available" && !rec.ttl) || rec.state === "deferred" || (rec.state === "scheduled" && !rec.far && !rec.cancelledAt);
        if (!ok) diff.push(`${rec.id} in the queue (${m.state}), ledger ${rec.state}${rec.cancelled ? " cancelled" : ""}`);
        else if (m.state !== want) diff.push(`${rec.id} shown ${m.state}, ledger ${rec.state}`);
      }
      for (const rec of l.order) {
        if (rec.kind !== kind || seen.has(rec.id)) continue;
        const must = dlq
          ? rec.state === "dlq" || (rec.state === "available" && rec.ttl)
          : (rec.state === "available" && !rec.ttl) || rec.state === "deferred" || (rec.state === "scheduled" && !rec.cancelled);
        if (must) diff.push(`missing ${rec.id} (${rec.state})`);
      }
    }
  }
  return diff;
}

// drain receives and completes everything left: deferred messages by
// number, the queues, the dead-letter queues and every session, until the
// ledger expects nothing and peeks find nothing. Locks that ran out unseen
// let their messages come back within a lock duration.
async function drain(l, d) {
  // Locks that ran out unseen bring their messages back within a lock
  // duration; a copy no link could settle, once its lock runs out.
  const start = Date.now();
  const deadline = () => Math.max(start + 2 * lockMs + 10_000, l.strandedUntil + 10_000);
  // receiveShown receives as many messages as a peek shows receivable,
  // with a wait long enough for them (those whose locks run out unseen
  // come on a later round).
  const receiveShown = async (r, shown, kind, where, hold = null) => {
    const n = shown.filter((m) => m.state === "active" && !l.recs.get(m.messageId)?.holder).length;
    if (n) d.record(kind, where, "lock", await d.receiveFrom(r, n, 1_000, `drain ${kind} ${where}`, hold), hold);
  };
  while (!l.stopped) {
    const nonEmpty = [];
    for (const kind of Object.keys(kinds)) {
      if (kind !== "sess") {
        const claimed = l.claimDeferred(d.rng, d.name, 1000, (r) => r.kind === kind);
        if (claimed.length) d.gotDeferred(kind, claimed, await d.settler(kind).receiveDeferredMessages(claimed.map((r) => r.seq)), "lock");
      }
      for (const dlq of kind === "sess" ? [true] : [false, true]) {
        const shown = await peekAll(d.settler(kind, dlq));
        if (shown.length) nonEmpty.push(`${kind}${dlq ? " DLQ" : ""}: ${shown.map((m) => `${m.messageId}(${m.state})`).join(" ")}`);
        await receiveShown(d.settler(kind, dlq), shown, kind, dlq ? "dlq" : "main");
      }
      while (d.held.length && !l.stopped) await d.settleAt(0, { kind: "complete" });
    }
    // Sessions with messages left, by the ledger or by a peek of the queue.
    const left = new Set();
    for (const r of l.order) {
      if (r.kind === "sess" && (r.state === "available" || r.state === "deferred" || (r.state === "scheduled" && !r.cancelled))) left.add(r.session);
    }
    const shown = await peekAll(d.settler("sess"));
    if (shown.length) nonEmpty.push(`sess: ${shown.map((m) => `${m.messageId}(${m.state})`).join(" ")}`);
    for (const m of shown) left.add(m.sessionId);
    for (const id of left) {
      if (l.stopped) break;
      const sr = await d.c.acceptSession(l.queue("sess"), id);
      const hold = { r: sr, id, worker: d };
      l.holdSession(id, d.name, hold);
      d.holds = [hold];
      const live = () => d.holds.includes(hold) && !l.stopped;
      await d.checkState(hold);
      if (live()) await d.peekSession();
      while (l.availableIn(id) > 0 && live()) await d.receiveSession();
      const deferred = live() ? l.claimDeferred(d.rng, d.name, 1000, (r) => r.kind === "sess" && r.session === id) : [];
      if (deferred.length) {
        try {
          d.gotDeferred("sess", deferred, await sr.receiveDeferredMessages(deferred.map((r) => r.seq)), "lock", hold);
        } catch (err) {
          l.unclaim(deferred, d.name);
          d.holdFailed(hold, err, `drain: receive deferred in ${id}`, deferred);
        }
      }
      // What the ledger could not count: activated scheduled messages.
      if (live()) {
        try {
          await receiveShown(sr, await peekAll(sr), "sess", "main", hold);
        } catch (err) {
          d.holdFailed(hold, err, `drain: peek session ${id}`);
        }
      }
      while (d.held.length && !l.stopped) await d.settleAt(0, { kind: "complete" });
      if (d.holds.includes(hold)) await d.closeHold(hold);
    }
    if (l.stopped) return;
    const expected = l.order.filter((r) => r.state !== "done" && !r.cancelled);
    if (!expected.length && !nonEmpty.length && !left.size) return;
    if (Date.now() > deadline()) {
      return l.fail(`drain: the ledger still expects ${expected.map((r) => `${r.id}(${r.state})`).join(" ") || "nothing"}; peeks show ${nonEmpty.join("; ") || "nothing"}`, expected);
    }
    await sleep(200);
  }
}

// checkFinal: every message left exactly once, except cancelled scheduled
// ones (far ahead never, near at most once).
function checkFinal(l) {
  const perKind = {};
  for (const r of l.order) {
    if (r.far && (!r.cancelled || r.completions || r.deliveries)) l.fail(`${r.id}, scheduled far ahead, was not cancelled or arrived`, [r]);
    else if (r.cancelledAt && (r.completions || r.deliveries)) l.fail(`${r.id} arrived; its cancel was answered before its time`, [r]);
    else if (r.cancelled && !r.far && r.completions > 1) l.fail(`${r.id}, cancelled, left ${r.completions} times`, [r]);
    else if (!r.cancelled && (r.state !== "done" || r.completions !== 1)) l.fail(`${r.id} left its queue ${r.completions} times and is ${r.state}`, [r]);
    perKind[r.kind] = (perKind[r.kind] ?? 0) + r.completions;
  }
  return perKind;
}

// runSeed runs one seed's workload on its own queues and clients, and
// returns what failed (nothing when the ledger holds).
async function runSeed(t, seed) {
  const l = new Ledger(seed);
  const roles = ["sender", "sender", "receiver", "receiver", "streamer", "sessions", "sessions"];
  // No retries: against a broker on the loopback nothing should need one,
  // and a retried settlement could hide an answer.
  const client = () => broker.client({ retryOptions: { maxRetries: 0, timeoutInMs: 30_000 } });
  const workers = roles.map((role, i) => new Worker(l, `${role}${i}`, role, i % 2, client()));
  const drainer = new Worker(l, "drain", "drain", 0, client());
  const phases = [];
  let mark = Date.now();
  const phase = (name) => {
    phases.push(`${name} ${Date.now() - mark} ms`);
    mark = Date.now();
  };
  try {
    await Promise.all(workers.map((w) => w.run()));
    phase("workload");
    if (!l.stopped) await checkQuiet(l, drainer).catch((err) => drainer.check(err, "quiet check"));
    phase("quiet check");
    if (!l.stopped) await drain(l, drainer).catch((err) => drainer.check(err, "drain"));
    phase("drain");
    const perKind = l.stopped ? {} : checkFinal(l);
    t.diagnostic(`seed ${seed}: ${l.order.length} messages, left per queue ${JSON.stringify(perKind)}; ${phases.join(", ")}`);
    t.diagnostic(`seed ${seed}: ${Object.entries(l.tally).sort().map(([k, v]) => `${k} ${v}`).join(", ")}`);
    t.diagnostic(`seed ${seed}: ms per operation ${Object.entries(l.timing).sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v}`).join(", ")}`);
  } finally {
    for (const w of [...workers, drainer]) await w.close();
  }
  if (!l.failures.length) return null;
  const again = `WALBUS_JSRANDOM_SEED=${seed} WALBUS_JSRANDOM_STEPS=${steps} node --test random.test.mjs`;
  return `${l.failures.slice(0, 5).join("\n")}\n(seed ${seed}: ${l.failures.length} failures; repeat with: ${again})`;
}

// Seeds run one after another, each on its own queues and clients (side
// by side they load a small machine enough to disturb the other test files
// running alongside: the SDK gives a drain 200 ms).
for (const seed of seeds) {
  test(
    `random workload through the JS SDK keeps the ledger (seed ${seed}, ${steps} steps per worker)`,
    async (t) => {
      const failed = await runSeed(t, seed);
      if (failed) assert.fail(failed);
    },
    { timeout: 120_000 + steps * 1_500 },
  );
}

// Test harness: a real `walbus serve` per test file, configured with the
// Azure Service Bus emulator's Config.json, and helpers for the tests.
//
// WALBUS_BIN names the broker binary (make test sets it); without it the
// harness uses bin/walbus at the repository root. WALBUS_KEEP=1 keeps each
// broker's data directory and log after the run.

import { execFileSync, spawn } from "node:child_process";
import { createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, test } from "node:test";
import { ServiceBusClient } from "@azure/service-bus";

const here = path.dirname(fileURLToPath(import.meta.url));

// The emulator's defaults for a queue; tests override what they need.
export const defaultQueueProperties = Object.freeze({
  LockDuration: "PT1M",
  MaxDeliveryCount: 3,
  RequiresSession: false,
  RequiresDuplicateDetection: false,
  DuplicateDetectionHistoryTimeWindow: "PT20S",
  DefaultMessageTimeToLive: "PT1H",
  DeadLetteringOnMessageExpiration: false,
  ForwardTo: "",
  ForwardDeadLetteredMessagesTo: "",
});

// A Config.json in the emulator's format, one namespace, the given queues
// ({name: properties to override}).
export function emulatorConfig(queues) {
  return {
    UserConfig: {
      Namespaces: [
        {
          Name: "sbemulatorns",
          Queues: Object.entries(queues).map(([name, props]) => ({
            Name: name,
            Properties: { ...defaultQueueProperties, ...props },
          })),
          Topics: [],
        },
      ],
      Logging: { Type: "File" },
    },
  };
}

function walbusBinary() {
  const bin = process.env.WALBUS_BIN || path.resolve(here, "../../../bin/walbus");
  if (!existsSync(bin)) {
    throw new Error(`walbus binary ${bin} not found: build it (go build -o bin/walbus ./cmd/walbus) or set WALBUS_BIN`);
  }
  return bin;
}

// Brokers still running when the test process exits (a test runner timeout,
// an uncaught error) are killed rather than left behind.
const live = new Set();
process.once("exit", () => {
  for (const proc of live) proc.kill("SIGKILL");
});

// Broker is one walbus process (restartable on the same port and data dir).
// Options: tls: true gives it a certificate from `walbus cert` (for
// localhost and 127.0.0.1), so its port also serves TLS, and caPath names
// the authority that signed it; args are more `walbus serve` flags.
export class Broker {
  constructor(queues, { tls = false, args = [] } = {}) {
    this.queues = queues;
    this.dir = mkdtempSync(path.join(os.tmpdir(), "walbus-jssdk-"));
    this.dataDir = path.join(this.dir, "data");
    this.configPath = path.join(this.dir, "Config.json");
    this.logPath = path.join(this.dir, "walbus.log");
    writeFileSync(this.configPath, JSON.stringify(emulatorConfig(queues), null, 2));
    this.extraArgs = [...args];
    this.caPath = null;
    if (tls) {
      const certs = path.join(this.dir, "certs");
      execFileSync(walbusBinary(), ["cert", "--out", certs], { stdio: "pipe" });
      this.caPath = path.join(certs, "ca.pem");
      this.extraArgs.push("--tls-cert", path.join(certs, "server.pem"), "--tls-key", path.join(certs, "server-key.pem"));
    }
    this.proc = null;
    this.port = 0;
    this.clients = [];
  }

  get connectionString() {
    return (
      `Endpoint=sb://127.0.0.1:${this.port};SharedAccessKeyName=RootManageSharedAccessKey;` +
      "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
    );
  }

  // start runs walbus and waits for its own "listening" log line. The
  // first start takes a port the kernel chooses (--amqp 127.0.0.1:0) and
  // keeps it for restarts: a port found free here and passed on could be
  // taken by a broker of a test file running alongside before this one
  // binds it, and a connection check would then reach that broker.
  async start() {
    const logStart = existsSync(this.logPath) ? statSync(this.logPath).size : 0;
    const log = createWriteStream(this.logPath, { flags: "a" });
    await new Promise((resolve) => log.once("open", resolve));
    // --http= turns off the /health listener, whose fixed default port
    // would clash between the brokers of test files running in parallel.
    const args = [
      "serve", "--data", this.dataDir, "--amqp", `127.0.0.1:${this.port}`, "--config", this.configPath, "--http=",
      ...this.extraArgs,
    ];
    const proc = spawn(walbusBinary(), args, { stdio: ["ignore", log, log] });
    this.proc = proc;
    live.add(proc);
    let exited = null;
    proc.once("exit", (code, signal) => {
      exited = { code, signal };
      live.delete(proc);
      log.end();
    });
    const deadline = Date.now() + 30_000;
    for (;;) {
      const port = this.listeningPort(logStart);
      if (port) {
        this.port = port;
        return;
      }
      if (exited) {
        throw new Error(`walbus exited while starting (${JSON.stringify(exited)}):\n${this.logTail()}`);
      }
      if (Date.now() > deadline) {
        await this.stop();
        throw new Error(`walbus did not report listening on ${this.port}:\n${this.logTail()}`);
      }
      await sleep(50);
    }
  }

  // listeningPort is the AMQP port in the log's "listening" line written
  // after offset, or 0.
  listeningPort(offset) {
    let text = "";
    try {
      text = readFileSync(this.logPath).subarray(offset).toString("utf8");
    } catch {}
    const m = text.match(/msg=listening amqp=127\.0\.0\.1:(\d+)/);
    return m ? Number(m[1]) : 0;
  }

  // stop sends SIGTERM and, after a grace period, SIGKILL.
  async stop() {
    const proc = this.proc;
    this.proc = null;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((resolve) => proc.once("exit", resolve));
    proc.kill("SIGTERM");
    const killer = setTimeout(() => proc.kill("SIGKILL"), 15_000);
    await exited;
    clearTimeout(killer);
  }

  // crash kills the broker with SIGKILL: no graceful shutdown.
  async crash() {
    const proc = this.proc;
    this.proc = null;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((resolve) => proc.once("exit", resolve));
    proc.kill("SIGKILL");
    await exited;
  }

  // restart stops the broker (SIGTERM, or SIGKILL with crash: true) and
  // starts it again on the same port and data directory.
  async restart({ crash = false } = {}) {
    await (crash ? this.crash() : this.stop());
    await this.start();
  }

  // client makes a ServiceBusClient that close() closes. Retries wait 1 s
  // instead of the SDK's 30 s, so an error the SDK retries surfaces as
  // that error within the test's timeout rather than as a timeout.
  client(options = {}) {
    const c = new ServiceBusClient(this.connectionString, {
      ...options,
      retryOptions: { retryDelayInMs: 1_000, ...options.retryOptions },
    });
    this.clients.push(c);
    return c;
  }

  log() {
    try {
      return readFileSync(this.logPath, "utf8");
    } catch {
      return "";
    }
  }

  logTail(lines = 60) {
    return this.log().split("\n").slice(-lines).join("\n");
  }

  // connectionsOpened counts the AMQP connections the broker has accepted
  // (it logs "connection opened" for each).
  connectionsOpened() {
    return this.log().split("\n").filter((l) => l.includes("connection opened")).length;
  }

  async close() {
    for (const c of this.clients) {
      await c.close().catch(() => {});
    }
    this.clients = [];
    await this.stop();
    if (process.env.WALBUS_KEEP) {
      console.error(`walbus data and log kept in ${this.dir}`);
    } else {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }
}

// brokerSuite starts one broker with the given queues (and Broker's
// options) for a test file and returns a `test` function whose failures
// print the tail of the broker log.
export function brokerSuite(queues, options) {
  const broker = new Broker(queues, options);
  before(async () => {
    await broker.start();
  });
  after(async () => {
    await broker.close();
  });
  const brokerTest = (name, fn, { timeout = 60_000 } = {}) =>
    test(name, { timeout }, async (t) => {
      try {
        await fn(t);
      } catch (err) {
        // The SDK's retry gives up with an AggregateError of every attempt
        // and an empty message; show the attempts.
        if (err instanceof AggregateError && !err.message) {
          err.message = err.errors.map((e) => `${e?.code ?? e?.name}: ${e?.message}`).join("; ");
        }
        console.error(`--- ${name}: walbus log (last lines) ---\n${broker.logTail()}\n---`);
        throw err;
      }
    });
  return { broker, test: brokerTest };
}

// uniqueId is a fresh message or session id.
let counter = 0;
export function uniqueId(prefix = "id") {
  counter++;
  return `${prefix}-${process.pid}-${Date.now()}-${counter}`;
}

// receiveAll receives until `count` messages have arrived or `windowMs`
// passes without any; it never asserts on time.
export async function receiveAll(receiver, count, { windowMs = 5_000, deadlineMs = 30_000 } = {}) {
  const out = [];
  const deadline = Date.now() + deadlineMs;
  while (out.length < count && Date.now() < deadline) {
    const got = await receiver.receiveMessages(count - out.length, { maxWaitTimeInMs: windowMs });
    if (got.length === 0) break;
    out.push(...got);
  }
  return out;
}

// waitFor polls fn until it returns a truthy value or the deadline passes
// (then it returns the last value); for conditions that come true with time.
export async function waitFor(fn, { deadlineMs = 20_000, everyMs = 200 } = {}) {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const v = await fn();
    if (v || Date.now() > deadline) return v;
    await sleep(everyMs);
  }
}

// seqs is a list of sequence numbers (Long) as strings, for comparisons.
export const seqs = (msgs) => msgs.map((m) => m.sequenceNumber.toString());

// graphile-worker's and pg-boss's side of fairjob's Postgres-path benchmark
// (`pump_bench --peers graphile-worker,pg-boss`, in tests/src/bin/pump_bench.rs).
// The bench installs this directory with `npm ci` and drives these commands as
// subprocesses, reading JSON lines on stdout (anything else there is ignored;
// diagnostics go to stderr):
//
//   node bench.mjs SYSTEM setup --url URL
//     the system's schema (graphile-worker: runMigrations; pg-boss: start(),
//     which creates its schema, and createQueue for `noop` and `latency`) and
//     the application's table `bench_app`; prints {"version": "..."}.
//   node bench.mjs SYSTEM clean --url URL
//     empties the system's job tables and bench_app between runs.
//   node bench.mjs SYSTEM work --url URL --mode latency|noop --settings default|default-batched|throughput
//                             [--concurrency 8] [--batch 500]
//     one worker process until SIGTERM or until stdin closes; prints
//     {"ready": t} once it is started. `latency` jobs print {"id": N, "started": t}
//     as they start; `noop` jobs do nothing and the process prints
//     {"count": c, "first": t, "last": t} at most every 20 ms while c changes.
//   node bench.mjs SYSTEM produce --url URL --kind latency|noop|none --jobs N
//                                [--producers 8] [--rate R] [--app 1] [--base 0]
//     N transactions by P concurrent producers (P connections), each
//     BEGIN; [INSERT INTO bench_app]; [the system's enqueue of one job]; COMMIT,
//     paced at R transactions/s in total when --rate is given; `latency` prints
//     {"id": N, "committed": t} after each commit; all kinds print
//     {"started": t, "ended": t, "commits": N} at the end.
//   node bench.mjs SYSTEM bulk --url URL --jobs N [--batch 1000]
//     N `noop` jobs added in bulk (graphile-worker: addJobs; pg-boss: insert),
//     batches of --batch; prints {"secs": s}.
//
// Times t are Unix seconds (float), the clock fairjob's side reads too.
//
// What each system's enqueue in the caller's transaction is:
// - graphile-worker: `SELECT graphile_worker.add_job('noop', $1::json)` on the
//   transaction's connection (its documented SQL API; it sends a NOTIFY).
// - pg-boss: `boss.send(queue, data, { db })` with `db.executeSql` running on
//   the transaction's connection (pg-boss's documented way to join a
//   transaction).
//
// Settings: `default` is each library as a user gets it (graphile-worker:
// concurrency 1, pool 10, poll 2 s plus LISTEN/NOTIFY; pg-boss: one work()
// with batchSize 1 polling every 2 s; `default-batched`: the same with
// batchSize --batch, for pg-boss to keep up with the offered rate). `throughput` is tuned for a backlog:
// graphile-worker with concurrency C, a pool of C + 1 and a local queue of 500
// (its performance page's batching); pg-boss with C work() loops each fetching
// --batch jobs and polling every 0.5 s (its minimum), a pool of C + 1.

import { createRequire } from "node:module";
import pg from "pg";

const require = createRequire(import.meta.url);

function flags(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || argv[i + 1] === undefined) {
      throw new Error(`bad arguments: ${argv.join(" ")}`);
    }
    out[argv[i].slice(2)] = argv[i + 1];
  }
  return out;
}

function number(f, name, fallback) {
  const v = f[name] ?? fallback;
  const n = Number(v);
  if (v === undefined || !Number.isFinite(n) || n < 0) {
    throw new Error(`--${name} needs a number, got ${v}`);
  }
  return n;
}

const now = () => (performance.timeOrigin + performance.now()) / 1000;
const emit = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const APP_TABLE =
  "CREATE TABLE IF NOT EXISTS bench_app (id bigserial PRIMARY KEY, body text NOT NULL, at timestamptz NOT NULL DEFAULT now())";

/// Runs until SIGTERM/SIGINT or stdin's end (the bench went away), then `stop`.
function untilStopped(stop) {
  let stopping = false;
  const end = async () => {
    if (stopping) return;
    stopping = true;
    try {
      await Promise.race([stop(), sleep(5000)]);
    } catch (e) {
      console.error(`stopping: ${e.message}`);
    }
    process.exit(0);
  };
  process.on("SIGTERM", end);
  process.on("SIGINT", end);
  process.stdin.on("end", end);
  process.stdin.on("error", end);
  process.stdin.resume();
}

/// The no-op jobs' progress: counted here, printed at most every 20 ms.
function noopCounter() {
  const c = { count: 0, first: null, last: null, shown: 0 };
  c.hit = () => {
    const t = now();
    if (c.first === null) c.first = t;
    c.last = t;
    c.count += 1;
  };
  setInterval(() => {
    if (c.count !== c.shown) {
      c.shown = c.count;
      emit({ count: c.count, first: c.first, last: c.last });
    }
  }, 20).unref();
  return c;
}

// ---------------------------------------------------------------------------
// graphile-worker

const graphile = {
  version: () => require("graphile-worker/package.json").version,

  async setup(url) {
    const { runMigrations } = await import("graphile-worker");
    await runMigrations({ connectionString: url, logger: await quietLogger() });
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query(APP_TABLE);
    await c.end();
  },

  async clean(url) {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query("DELETE FROM graphile_worker._private_jobs");
    await c.query("TRUNCATE bench_app");
    await c.end();
  },

  async work(url, f) {
    const { run } = await import("graphile-worker");
    const counter = noopCounter();
    const taskList = {
      latency: async (payload) => emit({ id: payload.id, started: now() }),
      noop: async () => counter.hit(),
    };
    const options = {
      connectionString: url,
      taskList,
      noHandleSignals: true,
      logger: await quietLogger(),
    };
    if (f.settings === "throughput") {
      const c = number(f, "concurrency", 8);
      Object.assign(options, {
        concurrency: c,
        maxPoolSize: c + 1,
        preset: { worker: { localQueue: { size: 500 } } },
      });
    }
    const runner = await run(options);
    emit({ ready: now() });
    untilStopped(() => runner.stop());
  },

  // The application's transaction runs this on its own connection.
  enqueueSql: "SELECT graphile_worker.add_job($1, $2::json)",

  async enqueuer(_url) {
    return {
      enqueue: (client, queue, data) =>
        client.query(graphile.enqueueSql, [queue, JSON.stringify(data)]),
      close: async () => {},
    };
  },

  async bulk(url, n, batch) {
    const { makeWorkerUtils } = await import("graphile-worker");
    const utils = await makeWorkerUtils({
      connectionString: url,
      logger: await quietLogger(),
    });
    const t0 = now();
    for (let i = 0; i < n; i += batch) {
      const specs = [];
      for (let k = i; k < Math.min(n, i + batch); k++) {
        specs.push({ identifier: "noop", payload: { id: k } });
      }
      await utils.addJobs(specs);
    }
    const secs = now() - t0;
    await utils.release();
    return secs;
  },
};

async function quietLogger() {
  const { Logger } = await import("graphile-worker");
  return new Logger(() => (level, message) => {
    if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`);
  });
}

// ---------------------------------------------------------------------------
// pg-boss

async function newBoss(options) {
  const { default: PgBoss } = await import("pg-boss");
  const boss = new PgBoss(options);
  boss.on("error", (e) => console.error(`pg-boss error: ${e.message}`));
  await boss.start();
  return boss;
}

const pgboss = {
  version: () => require("pg-boss/package.json").version,

  async setup(url) {
    const boss = await newBoss({ connectionString: url, max: 2 });
    for (const q of ["noop", "latency"]) {
      if (!(await boss.getQueue(q))) await boss.createQueue(q);
    }
    await boss.getDb().executeSql(APP_TABLE);
    await boss.stop({ graceful: false, wait: true });
  },

  async clean(url) {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query("TRUNCATE pgboss.job, pgboss.archive");
    await c.query("TRUNCATE bench_app");
    await c.end();
  },

  async work(url, f) {
    const counter = noopCounter();
    if (f.settings === "throughput") {
      const c = number(f, "concurrency", 8);
      const batchSize = number(f, "batch", 500);
      const boss = await newBoss({ connectionString: url, max: c + 1 });
      for (let i = 0; i < c; i++) {
        await boss.work("noop", { batchSize, pollingIntervalSeconds: 0.5 }, async (jobs) => {
          for (const _ of jobs) counter.hit();
        });
      }
      emit({ ready: now() });
      untilStopped(() => boss.stop({ graceful: false, wait: false }));
    } else {
      const boss = await newBoss({ connectionString: url });
      const queue = f.mode === "latency" ? "latency" : "noop";
      // `default-batched`: the default polling with batches big enough to keep up.
      const options = f.settings === "default-batched" ? { batchSize: number(f, "batch", 1) } : {};
      await boss.work(queue, options, async (jobs) => {
        for (const job of jobs) {
          if (queue === "latency") emit({ id: job.data.id, started: now() });
          else counter.hit();
        }
      });
      emit({ ready: now() });
      untilStopped(() => boss.stop({ graceful: false, wait: false }));
    }
  },

  async enqueuer(url) {
    // Only for `send`'s SQL: the job goes through `db`, the transaction's connection.
    const boss = await newBoss({ connectionString: url, max: 1, supervise: false, schedule: false });
    return {
      enqueue: (client, queue, data) =>
        boss.send(queue, data, { db: { executeSql: (text, values) => client.query(text, values) } }),
      close: () => boss.stop({ graceful: false, wait: true }),
    };
  },

  async bulk(url, n, batch) {
    const boss = await newBoss({ connectionString: url, max: 2, supervise: false, schedule: false });
    const t0 = now();
    for (let i = 0; i < n; i += batch) {
      const jobs = [];
      for (let k = i; k < Math.min(n, i + batch); k++) {
        jobs.push({ name: "noop", data: { id: k } });
      }
      await boss.insert(jobs);
    }
    const secs = now() - t0;
    await boss.stop({ graceful: false, wait: true });
    return secs;
  },
};

// ---------------------------------------------------------------------------
// The producers: the application's transactions, the same for both systems

async function produce(sys, url, f) {
  const kind = f.kind;
  if (!["latency", "noop", "none"].includes(kind)) throw new Error(`--kind latency|noop|none, got ${kind}`);
  const n = number(f, "jobs");
  const producers = Math.max(1, number(f, "producers", 8));
  const rate = f.rate === undefined ? null : number(f, "rate");
  const app = f.app === "1";
  const base = number(f, "base", 0);
  const enqueuer = kind === "none" ? null : await sys.enqueuer(url);
  const pool = new pg.Pool({ connectionString: url, max: producers });
  const clients = [];
  for (let i = 0; i < producers; i++) clients.push(await pool.connect());
  let next = 0;
  const started = now();
  const one = async (client) => {
    for (;;) {
      const i = next++;
      if (i >= n) return;
      if (rate !== null) {
        const wait = started + i / rate - now();
        if (wait > 0) await sleep(wait * 1000);
      }
      const id = base + i;
      await client.query("BEGIN");
      if (app) await client.query("INSERT INTO bench_app (body) VALUES ($1)", [`order ${id}`]);
      if (enqueuer) await enqueuer.enqueue(client, kind, { id });
      await client.query("COMMIT");
      if (kind === "latency") emit({ id, committed: now() });
    }
  };
  await Promise.all(clients.map(one));
  const ended = now();
  for (const c of clients) c.release();
  await pool.end();
  if (enqueuer) await enqueuer.close();
  emit({ started, ended, commits: n });
}

// ---------------------------------------------------------------------------

const SYSTEMS = { "graphile-worker": graphile, "pg-boss": pgboss };

async function main() {
  const [system, command, ...rest] = process.argv.slice(2);
  const sys = SYSTEMS[system];
  if (!sys) throw new Error(`unknown system ${system} (graphile-worker, pg-boss)`);
  const f = flags(rest);
  if (!f.url) throw new Error("--url is required");
  switch (command) {
    case "setup":
      await sys.setup(f.url);
      emit({ version: sys.version() });
      process.exit(0);
      break;
    case "clean":
      await sys.clean(f.url);
      emit({ clean: true });
      process.exit(0);
      break;
    case "work":
      await sys.work(f.url, f);
      break;
    case "produce":
      await produce(sys, f.url, f);
      process.exit(0);
      break;
    case "bulk":
      emit({ secs: await sys.bulk(f.url, number(f, "jobs"), Math.max(1, number(f, "batch", 1000))) });
      process.exit(0);
      break;
    default:
      throw new Error(`unknown command ${command} (setup, clean, work, produce, bulk)`);
  }
}

main().catch((e) => {
  console.error(`${process.argv[2] ?? "bench"}: ${e.stack ?? e}`);
  process.exit(1);
});

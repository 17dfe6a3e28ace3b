// BullMQ's side of fairjob's benchmark (`bench --peers bullmq`, in
// tests/src/bin/bench.rs), through BullMQ's own Queue and Worker. The bench
// copies this file and package.json into a temporary directory, runs
// `npm install` there, and then:
//
//   node bench.mjs enqueue --url redis://127.0.0.1:PORT --jobs N [--batch 1000]
//     adds N `BenchNoopJob` jobs to queue `bench` with Queue.addBulk in batches;
//     prints "<wall seconds> <cpu seconds>" (connecting excluded)
//   node bench.mjs process --url redis://127.0.0.1:PORT --jobs N --concurrency 25
//     runs one Worker until SIGTERM; the job stamps bench:first on its first call
//     and bench:last on call N (Unix seconds), like the fairjob and Sidekiq twins.
//
// The worker drops completed jobs ({ count: 0 }), as Sidekiq and fairjob keep
// no record of a job that succeeded; BullMQ's default would keep them all.

import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

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
  if (v === undefined || !Number.isInteger(n) || n < 0) {
    throw new Error(`--${name} needs a whole number, got ${v}`);
  }
  return n;
}

const nowSecs = () => (performance.timeOrigin + performance.now()) / 1000;
const cpuSecs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

async function enqueue(f) {
  const n = number(f, "jobs");
  const batch = Math.max(1, number(f, "batch", 1000));
  const connection = new IORedis(f.url, { maxRetriesPerRequest: null });
  const queue = new Queue("bench", { connection });
  await queue.waitUntilReady();
  const t0 = performance.now();
  const c0 = cpuSecs();
  for (let i = 0; i < n; i += batch) {
    const jobs = [];
    for (let k = i; k < Math.min(n, i + batch); k++) {
      jobs.push({ name: "BenchNoopJob", data: { index: k } });
    }
    await queue.addBulk(jobs);
  }
  const wall = (performance.now() - t0) / 1000;
  const cpu = cpuSecs() - c0;
  console.log(`${wall} ${cpu}`);
  await queue.close();
  await connection.quit();
}

async function work(f) {
  const target = number(f, "jobs");
  const concurrency = number(f, "concurrency", 25);
  const stamps = new IORedis(f.url, { maxRetriesPerRequest: null });
  let performed = 0;
  const worker = new Worker(
    "bench",
    async () => {
      performed += 1;
      if (performed === 1) await stamps.set("bench:first", String(nowSecs()));
      if (performed === target) await stamps.set("bench:last", String(nowSecs()));
    },
    {
      connection: new IORedis(f.url, { maxRetriesPerRequest: null }),
      concurrency,
      removeOnComplete: { count: 0 },
    },
  );
  worker.on("error", (e) => console.error("bullmq worker:", e));
  process.on("SIGTERM", async () => {
    await worker.close();
    await stamps.quit();
    process.exit(0);
  });
}

const [command, ...rest] = process.argv.slice(2);
const f = flags(rest);
if (!f.url) throw new Error("--url is required");
if (command === "enqueue") await enqueue(f);
else if (command === "process") await work(f);
else throw new Error("usage: bench.mjs enqueue|process --url URL --jobs N [--concurrency C]");

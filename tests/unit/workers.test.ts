/**
 * Many threads at once: norms from several Web Workers (tests/fixtures/norm_worker.ts), each with its own Device
 * on the CUDA device when there is one (they share its primary context; each makes it current on its own thread),
 * else on the CPU backend; a bounded number of iterations, every result within its dtype's tolerance of the
 * float64 reference, workers terminated, no device memory left behind by a round of workers (CUDA). What recover() in one thread
 * does to the others is documented in docs/threads.md and checked below with the fake driver.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, GpuError } from "../../mod.ts";
import type { NormJob, NormJobResult } from "../fixtures/norm_worker.ts";
import { FaultDriver } from "../fixtures/fault_driver.ts";
import { noGpuReason } from "../fixtures/helpers.ts";

const WORKERS = 3, ITERATIONS = 4;
/** Largest |got − reference| / (1 + |reference|) per output dtype: f32 accumulation, then rounding to the dtype. */
const TOLERANCE: Record<string, number> = { f32: 2e-5, f16: 2e-3, bf16: 8e-3 };

function runWorker(job: NormJob): { result: Promise<NormJobResult>; worker: Worker } {
  const worker = new Worker(new URL("../fixtures/norm_worker.ts", import.meta.url).href, { type: "module" });
  const result = new Promise<NormJobResult>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`worker ${job.id}: no answer in 120 s`)), 120_000);
    worker.onmessage = (e: MessageEvent<NormJobResult>) => {
      if (e.data.ready) return worker.postMessage(job); // the worker listens now
      clearTimeout(timer);
      resolve(e.data);
    };
    worker.onerror = (e: ErrorEvent) => {
      clearTimeout(timer);
      e.preventDefault?.();
      reject(new Error(`worker ${job.id} crashed: ${e.message}`));
    };
  });
  return { result, worker };
}

const backend = noGpuReason === undefined ? "cuda" : "cpu";

/** Runs one round of workers and checks every result; resolves once every worker has answered and is terminated. */
async function round(backend: "cuda" | "cpu", first: number): Promise<void> {
  const runs = Array.from({ length: WORKERS }, (_, i) => runWorker({ id: first + i, backend, iterations: ITERATIONS }));
  try {
    const results = await Promise.all(runs.map((r) => r.result));
    for (const r of results) {
      assert.equal(r.error, undefined, `worker ${r.id}: ${r.error}`);
      assert.equal(r.backend, backend);
      assert.equal(r.checks, 2 * ITERATIONS, `worker ${r.id}: every iteration checked`);
      for (const [dtype, err] of Object.entries(r.maxError!)) {
        assert.ok(err <= TOLERANCE[dtype], `worker ${r.id}, ${dtype}: error ${err} > ${TOLERANCE[dtype]}`);
      }
    }
    const dtypes = new Set(results.flatMap((r) => Object.keys(r.maxError!)));
    assert.deepEqual([...dtypes].sort(), ["bf16", "f16", "f32"], "every dtype ran");
  } finally {
    for (const r of runs) r.worker.terminate();
  }
}

test(`${WORKERS} Workers, each with its own Device (${backend}${noGpuReason ? `: ${noGpuReason}` : ""}), two rounds: every result matches float64, the second round leaves device memory where the first did`, async () => {
  // On CUDA this thread's Device holds the primary context, so the workers' closing does not destroy it and the
  // free memory before and after compares like with like.
  using here = Device.open({ backend, sanityCheck: false });
  const before = here.memoryInfo().free;
  await round(backend, 1);
  // The driver grows the shared context once, the first time other threads use it (2 MiB on the H100/H200 with
  // driver 580; lab/thread_memory shows it is not repeated by later rounds, nor by this thread's own use): a leak
  // is what a later round adds, so the baseline is taken after the first.
  const baseline = here.memoryInfo().free;
  await round(backend, 1 + WORKERS);
  // Every worker closed its Device before answering: what they allocated is free again.
  const after = here.memoryInfo().free;
  if (backend === "cuda") {
    console.log(
      `# device memory free: ${before} before the workers, ${baseline} after round 1, ${after} after round 2`,
    );
    assert.ok(after >= baseline, `free device memory ${after} after round 2, ${baseline} after round 1`);
  }
  // This thread's own Device still works after the others came and went (its context stays current here).
  using x = here.tensor(new Float32Array(64).fill(2), [64]);
  assert.deepEqual(Array.from(x.readSync()), new Array(64).fill(2));
});

/**
 * Two threads' runtimes over one driver, simulated in one thread: a second instance of runtime/device.ts (its own
 * module state, as a Worker has: its own current context, its own list of live Devices) over the same fake driver
 * (the same primary context).
 */
async function otherThreadDevice(): Promise<typeof Device> {
  const mod = await import(`../../runtime/device.ts?thread=${Math.random()}`) as { Device: typeof Device };
  assert.notEqual(mod.Device, Device, "a separate instance of the runtime's device module");
  return mod.Device;
}

test("recover() in one thread (fake driver): the reset drops every thread's GPU resources, the other thread is not told: its next use fails with a GpuError, a Device opened again there works", async () => {
  const OtherDevice = await otherThreadDevice();
  const fake = new FaultDriver({ resetClears: true });
  const a = Device.openWithDriver(fake), b = OtherDevice.openWithDriver(fake);
  const bufA = a.alloc(256), bufB = b.alloc(256);
  bufB.fill(1);
  a.recover(); // healthy context: "drop everything and start clean" — for the whole process
  assert.ok(bufA.closed, "this thread's resources are released");
  assert.equal(bufB.closed, false, "the other thread's runtime does not know: its buffer still looks open");
  // ...but its memory and its default stream went with the reset: the next driver call on them fails (on a real
  // GPU an address may even have been handed out again: docs/threads.md says not to recover() while other threads
  // hold Devices).
  assert.throws(() => bufB.fill(2), (e: unknown) => e instanceof GpuError && e.call === "cuMemsetD8Async" && !e.sticky);
  assert.throws(() => bufB.close(), (e: unknown) => e instanceof GpuError && e.call === "cuMemFree_v2");
  // Closing the other thread's Device reports its stale frees, and still releases its hold on the context.
  assert.throws(() => b.close(), (e: unknown) => e instanceof GpuError);
  assert.ok(b.closed);
  // A Device opened again in that thread works: the context is the same, reset and healthy.
  const b2 = OtherDevice.openWithDriver(fake);
  const fresh = b2.alloc(64);
  fresh.fill(3);
  const out = new Uint8Array(64);
  fresh.read(out);
  assert.deepEqual(Array.from(out), new Array(64).fill(3));
  b2.close();
  a.close();
  assert.equal(fake.retained, 0, "both threads released their retains");
  assert.equal(fake.live, 0);
});

test("a sticky error in one thread (fake driver): every thread's next use fails with a sticky GpuError; recover() there finds the context broken; each thread's close() works", async () => {
  const OtherDevice = await otherThreadDevice();
  const fake = new FaultDriver();
  const a = Device.openWithDriver(fake), b = OtherDevice.openWithDriver(fake);
  const bufB = b.alloc(256);
  void b.stream;
  fake.failAt(1, 700); // thread A's next call faults (as a faulting kernel would surface)
  assert.throws(() => a.synchronize(), (e: unknown) => e instanceof GpuError && e.sticky);
  // Thread B shares the context: its next call fails too (first from the driver, then at once).
  const sticky = (e: unknown) => e instanceof GpuError && e.sticky && /process must be restarted/.test(e.message);
  assert.throws(() => bufB.fill(1), sticky);
  const calls = fake.calls.length;
  assert.throws(() => b.alloc(16), sticky);
  assert.equal(fake.calls.length, calls, "thread B no longer reaches the driver");
  // recover() in thread B: the fake's reset does not clear the error (as NVIDIA 580): restart required.
  assert.throws(() => b.recover(), (e: unknown) => e instanceof GpuError && e.restartRequired);
  assert.throws(() => b.alloc(16), (e: unknown) => e instanceof GpuError && e.restartRequired);
  bufB.close();
  b.close();
  a.close();
  assert.equal(fake.live, 0, "the reset freed everything; nothing was freed twice");
});

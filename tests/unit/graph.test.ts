/**
 * Graph capture (runtime/graph.ts, Stream.beginCapture/endCapture/capture).
 *
 * Without a GPU: the CPU backend refuses capture clearly, and the bookkeeping (capture state, errors raised
 * before the driver sees an illegal call, disposal) is checked over a fake graph driver installed on a CPU
 * device. With CUDA: captured norms replay correctly on new data, update() retargets an executable graph,
 * the driver's refusals surface as GraphUpdateError, and everything is released once.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { cpuNormForward, Device, layerNorm, layerNormBackward, rmsNorm, rmsNormBackward, Tensor, UnsupportedError, loadKernels } from "../../mod.ts";
import { DisposedError, Graph, GraphExec, GraphUpdateError, type Stream } from "../../gpu.ts";
import type { Driver, GraphDriver, GraphUpdateRefusal } from "../../runtime/driver.ts";
import { deviceCapturing } from "../../runtime/stream.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";

// ---- no GPU needed ------------------------------------------------------------------------------------

test("CPU backend: capture is UnsupportedError saying why; the stream stays usable", () => {
  using dev = Device.open({ backend: "cpu" });
  const s = dev.stream;
  assert.throws(() => s.beginCapture(), (e: unknown) => e instanceof UnsupportedError && /CPU backend/.test(e.message));
  assert.throws(() => s.capture(() => {}), UnsupportedError);
  assert.equal(s.capturing, false);
  assert.equal(s.captureStatus(), "none");
  s.synchronize();
  assert.throws(() => s.endCapture(), /not capturing/);
});

/** A graph driver that records calls; handles are counters. */
function fakeGraphs(refusal: GraphUpdateRefusal | null = null) {
  const calls: string[] = [];
  let next = 100n;
  const live = new Set<bigint>();
  const graphs: GraphDriver = {
    beginCapture: (_s, mode) => void calls.push(`begin:${mode}`),
    endCapture: () => (calls.push("end"), live.add(++next), next),
    captureStatus: () => "active",
    instantiate: (g) => (calls.push(`instantiate:${g}`), live.add(++next), next),
    launch: (e) => void calls.push(`launch:${e}`),
    update: (e, g) => (calls.push(`update:${e}<-${g}`), refusal),
    destroy: (g) => (assert.ok(live.delete(g), `graph ${g} destroyed once`), calls.push(`destroy:${g}`)),
    destroyExec: (e) => (assert.ok(live.delete(e), `exec ${e} destroyed once`), calls.push(`destroyExec:${e}`)),
  };
  return { graphs, calls, live };
}

/**
 * A CPU device whose activeDriver is a fake with `graphs` (and nothing else: any other driver call fails the
 * test). Streams and buffers are made before the fake goes in, so they are ordinary CPU objects.
 */
function fakeGpu(refusal: GraphUpdateRefusal | null = null) {
  const dev = Device.open({ backend: "cpu" });
  const stream = dev.createStream(), other = dev.createStream();
  const buf = dev.alloc(64);
  const x = dev.tensor(randoms(4 * 8, 1), [4, 8]), y = dev.empty([4, 8]);
  const fake = fakeGraphs(refusal);
  const driver = new Proxy({ backend: "cuda", graphs: fake.graphs } as unknown as Driver, {
    get: (t, k) => (k in t ? t[k as keyof Driver] : assert.fail(`unexpected driver call ${String(k)}`)),
  });
  Object.defineProperty(dev, "activeDriver", { get: () => (dev.closed ? assert.fail("device closed") : driver) });
  return { dev, stream, other, buf, x, y, ...fake };
}

test("capture bookkeeping: begin/end, capturing flag, modes, Graph → GraphExec → launch", () => {
  const { dev, stream, calls } = fakeGpu();
  try {
    assert.throws(() => stream.beginCapture({ mode: "sloppy" as "global" }), /"global", "threadLocal" or "relaxed"/);
    stream.beginCapture();
    assert.equal(stream.capturing, true);
    assert.throws(() => stream.beginCapture(), /already capturing/);
    const g = stream.endCapture();
    assert.equal(stream.capturing, false);
    assert.ok(g instanceof Graph);
    const gh = g.handle;
    using exec = g.instantiate();
    assert.ok(exec instanceof GraphExec);
    const eh = exec.handle;
    exec.launch(stream);
    g.close();
    exec.launch(stream); // an executable graph outlives the Graph it came from
    using g2 = stream.capture(() => {}, { mode: "relaxed" });
    assert.deepEqual(calls, [
      "begin:global", "end", `instantiate:${gh}`, `launch:${eh}`, `destroy:${gh}`, `launch:${eh}`, "begin:relaxed", "end",
    ]);
    assert.ok(g2 instanceof Graph);
  } finally {
    dev.close();
  }
});

test("synchronizing or reading into JS memory while capturing throws before the driver is called", () => {
  const { dev, stream, buf, x } = fakeGpu();
  try {
    stream.beginCapture();
    assert.throws(() => stream.synchronize(), (e: unknown) => e instanceof UnsupportedError && /Stream.synchronize while the stream is capturing/.test(e.message));
    assert.throws(() => stream.query(), /Stream.query while the stream is capturing/);
    assert.throws(() => buf.write(new Uint8Array(8), { stream }), /DeviceBuffer.write .* capturing/);
    assert.throws(() => buf.read(new Uint8Array(8), { stream }), /DeviceBuffer.read .* capturing/);
    assert.throws(() => x.readSync({ stream }), /capturing/);
    assert.equal(stream.capturing, true, "the capture goes on: nothing reached the driver");
    stream.endCapture().close();
  } finally {
    dev.close();
  }
});

test("norms during a capture: without out (or with stats) they refuse to allocate, naming the fix", () => {
  const { dev, stream, other, x, y } = fakeGpu();
  try {
    stream.beginCapture();
    assert.throws(() => rmsNorm(x, { stream }), (e: unknown) => e instanceof UnsupportedError && /allocate its output \(pass out\)/.test(e.message));
    assert.throws(() => layerNorm(x, { stream, out: y, stats: true }), /allocate the statistics/);
    // Allocation breaks a global capture whichever stream it is for: the check is per device.
    assert.throws(() => layerNorm(x, { stream: other }), /during a graph capture/);
    stream.endCapture().close();
  } finally {
    dev.close();
  }
});

test("backward during a capture: refuses to allocate dx or the parameter gradients, naming them", () => {
  const { dev, stream, buf, x, y } = fakeGpu();
  try {
    // Views of an existing buffer: making new tensors would call the (fake) driver.
    const mean = new Tensor(buf, [4]), rstd = new Tensor(buf, [4], { offset: 4 }), w = new Tensor(buf, [8], { offset: 8 });
    stream.beginCapture();
    const refuses = (names: RegExp) => (e: unknown) => e instanceof UnsupportedError && /graph capture/.test(e.message) && names.test(e.message);
    assert.throws(() => layerNormBackward(y, x, { mean, rstd, stream }), refuses(/allocate dx/));
    assert.throws(() => rmsNormBackward(y, x, { rstd, weight: w, stream, dx: y }), refuses(/allocate dweight/));
    stream.endCapture().close();
  } finally {
    dev.close();
  }
});

test("a stream closed mid-capture no longer blocks the device's allocating norms", () => {
  const { dev, stream, x } = fakeGpu();
  try {
    stream.beginCapture();
    assert.throws(() => rmsNorm(x), /during a graph capture/);
    assert.equal(deviceCapturing(dev), true);
    stream.close();
    assert.equal(deviceCapturing(dev), false);
  } finally {
    dev.close();
  }
});

test("capture(): a throwing recorder ends the capture, frees the partial graph and rethrows", () => {
  const { dev, stream, live } = fakeGpu();
  try {
    const boom = new Error("boom");
    assert.throws(() => stream.capture(() => { throw boom; }), (e) => e === boom);
    assert.equal(stream.capturing, false);
    assert.equal(live.size, 0, "the partial graph was destroyed");
    stream.capture(() => {}).close(); // and the stream can capture again
  } finally {
    dev.close();
  }
});

test("update(): success, and a refusal is GraphUpdateError with the driver's reason", () => {
  const ok = fakeGpu(null);
  try {
    using a = ok.stream.capture(() => {}), b = ok.stream.capture(() => {});
    using exec = a.instantiate();
    exec.update(b);
    assert.ok(ok.calls.includes(`update:${exec.handle}<-${b.handle}`));
    assert.throws(() => exec.update(ok.stream as unknown as Graph), /a Graph of the same device/);
  } finally {
    ok.dev.close();
  }
  const no = fakeGpu("topology-changed");
  try {
    using a = no.stream.capture(() => {}), b = no.stream.capture(() => {});
    using exec = a.instantiate();
    assert.throws(() => exec.update(b), (e: unknown) => e instanceof GraphUpdateError && e.reason === "topology-changed" && /topology-changed/.test(e.message));
  } finally {
    no.dev.close();
  }
});

test("disposal: each graph and exec destroyed once, by close() or by closing the device", () => {
  const { dev, stream, live, calls } = fakeGpu();
  const g = stream.capture(() => {});
  const exec = g.instantiate();
  const g2 = stream.capture(() => {});
  g.close();
  g.close();
  assert.equal(live.size, 2);
  assert.throws(() => g.instantiate(), DisposedError);
  dev.close(); // releases exec and g2 (the fake asserts each handle is destroyed once)
  assert.equal(live.size, 0);
  assert.equal(calls.filter((c) => c.startsWith("destroy")).length, 3);
  assert.throws(() => exec.launch(stream), DisposedError);
  assert.equal(g2.closed, true);
});

// ---- CUDA ---------------------------------------------------------------------------------------------

const ROWS = 8, D = 4096;

/** x (bf16), weight/bias (bf16), three outputs; warm-up launches so that kernels are loaded before capture. */
function setup(dev: Device, seed: number) {
  const x = dev.tensor(randoms(ROWS * D, seed, -3, 3), [ROWS, D], { dtype: "bf16" });
  const w = dev.tensor(randoms(D, seed + 1, 0.5, 1.5), [D], { dtype: "bf16" });
  const b = dev.tensor(randoms(D, seed + 2), [D], { dtype: "bf16" });
  const y1 = dev.empty([ROWS, D], { dtype: "bf16" }), y2 = dev.empty([ROWS, D], { dtype: "bf16" });
  return { x, w, b, y1, y2, close: () => [x, w, b, y1, y2].forEach((t) => t.close()) };
}

/** rmsNorm then layerNorm of its result: the sequence the graph tests capture. */
function twoNorms(t: ReturnType<typeof setup>, stream: Stream): void {
  rmsNorm(t.x, { weight: t.w, out: t.y1, stream });
  layerNorm(t.y1, { weight: t.w, bias: t.b, out: t.y2, stream });
}

const poison = (t: { buffer: { fill32(bits: number, o?: { stream?: Stream }): void } }, stream: Stream) =>
  t.buffer.fill32(0x7fc07fc0, { stream }); // bf16 NaN pairs

gpuTest("graph: captured rmsNorm → layerNorm replays on new input, bit-identical to eager launches", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  using stream = dev.createStream();
  const t = setup(dev, 10);
  try {
    twoNorms(t, stream); // warm-up: kernels loaded, plans cached
    stream.synchronize();
    using graph = stream.capture(() => twoNorms(t, stream));
    assert.equal(stream.capturing, false);
    using exec = graph.instantiate();
    for (const seed of [20, 30]) {
      // Eager reference for this input, then the replay on the same input.
      t.x.write(randoms(ROWS * D, seed, -3, 3), { stream });
      twoNorms(t, stream);
      const eager1 = t.y1.readSync({ stream }), eager2 = t.y2.readSync({ stream });
      poison(t.y1, stream);
      poison(t.y2, stream);
      exec.launch(stream);
      const g1 = t.y1.readSync({ stream }), g2 = t.y2.readSync({ stream });
      assert.deepEqual(g1, eager1, "graph rmsNorm = eager rmsNorm");
      assert.deepEqual(g2, eager2, "graph layerNorm = eager layerNorm");
      // And the eager result is right (bf16 output: 2^-8 relative plus a little absolute).
      const ref = cpuNormForward({ kind: "rms", rows: ROWS, d: D, x: t.x.readSync({ stream }), xStride: D, weight: t.w.readSync(), eps: 1e-6 });
      let worst = 0;
      for (let i = 0; i < ROWS * D; i++) worst = Math.max(worst, Math.abs(g1[i] - ref.y[i]) / (Math.abs(ref.y[i]) * 2 ** -7 + 1e-3));
      assert.ok(worst <= 1, `rmsNorm vs float64: ${worst} of the bf16 tolerance`);
    }
  } finally {
    t.close();
  }
});

gpuTest("graph: illegal calls during a capture throw UnsupportedError and leave the capture valid", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  using stream = dev.createStream();
  const t = setup(dev, 40);
  try {
    twoNorms(t, stream);
    stream.synchronize();
    stream.beginCapture();
    assert.throws(() => stream.synchronize(), UnsupportedError);
    assert.throws(() => t.y1.readSync({ stream }), UnsupportedError);
    assert.throws(() => rmsNorm(t.x, { weight: t.w, stream }), /pass out/);
    assert.equal(stream.captureStatus(), "active", "the driver saw nothing illegal");
    twoNorms(t, stream);
    using graph = stream.endCapture();
    assert.equal(stream.captureStatus(), "none");
    using exec = graph.instantiate();
    poison(t.y2, stream);
    exec.launch(stream);
    assert.ok(t.y2.readSync({ stream }).every(Number.isFinite), "the graph ran and overwrote the NaNs");
  } finally {
    t.close();
  }
});

gpuTest("graph: update() retargets an executable graph to other buffers; a different topology is refused", async () => {
  using dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  using stream = dev.createStream();
  const a = setup(dev, 50), b = setup(dev, 60);
  try {
    twoNorms(a, stream);
    twoNorms(b, stream);
    const eagerB = b.y2.readSync({ stream });
    using ga = stream.capture(() => twoNorms(a, stream));
    using gb = stream.capture(() => twoNorms(b, stream));
    using exec = ga.instantiate();
    exec.update(gb);
    poison(a.y2, stream);
    poison(b.y2, stream);
    exec.launch(stream);
    assert.deepEqual(b.y2.readSync({ stream }), eagerB, "the updated graph wrote b's output");
    assert.ok(a.y2.readSync({ stream }).every(Number.isNaN), "and left a's output alone");

    using one = stream.capture(() => rmsNorm(a.x, { weight: a.w, out: a.y1, stream }));
    let err: unknown;
    try {
      exec.update(one);
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof GraphUpdateError, `expected GraphUpdateError, got ${err}`);
    console.log(`# update refused as expected: ${err.reason}`);
    assert.ok(["topology-changed", "node-type-changed", "error"].includes(err.reason), err.reason);
    poison(b.y2, stream);
    exec.launch(stream); // unchanged by the refused update: still b's two norms
    assert.deepEqual(b.y2.readSync({ stream }), eagerB);
  } finally {
    a.close();
    b.close();
  }
});

gpuTest("graph: Graph/GraphExec are owned by the device; closing it releases them, use after is DisposedError", async () => {
  const dev = Device.open({ backend: "cuda" });
  await loadKernels(dev);
  const stream = dev.createStream();
  const t = setup(dev, 70);
  twoNorms(t, stream);
  const before = dev.owner.liveCount;
  const graph = stream.capture(() => twoNorms(t, stream));
  const exec = graph.instantiate();
  assert.equal(dev.owner.liveCount, before + 2);
  graph.close();
  assert.equal(dev.owner.liveCount, before + 1);
  exec.launch(stream);
  stream.synchronize();
  dev.close();
  assert.throws(() => exec.launch(), DisposedError);
  assert.equal(exec.closed, true);
});

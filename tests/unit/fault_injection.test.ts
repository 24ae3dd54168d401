/**
 * Fault injection at every driver call (as SQLite fails each allocation and each I/O in turn): each workflow a
 * user runs is counted once on the fake driver (tests/fixtures/fault_driver.ts), N calls; then for every k in
 * 1..N it runs again with call k failing, once with a recoverable code (CUDA_ERROR_OUT_OF_MEMORY) and once with a
 * sticky one (CUDA_ERROR_ILLEGAL_ADDRESS). For every k:
 * - the workflow throws a GpuError naming the failed call;
 * - nothing leaks: with a second Device keeping the primary context alive (so that closing the workflow's
 *   device does not free everything wholesale), the fake's live handles and allocations return to their
 *   baseline once the workflow's device is closed;
 * - outputs given to an op (`out`, `dx`, accumulated gradients) keep their bytes when it fails (the fake's kernels
 *   write nothing, so what could change them is a copy or memset of the op);
 * - recoverable: the same device works afterwards (the workflow runs again cleanly with the clean run's result);
 * - sticky: every later use throws a sticky GpuError saying the process must be restarted, without driver calls;
 *   recover() then reports restartRequired (the fake's reset does not clear the error, as on NVIDIA 580), the
 *   reset frees everything, and close() still works.
 * The fake's kernels compute nothing: results compare uploads, reads, device copies, memsets and the kernels
 * launched (names and geometry) against the clean run. The norms' values are checked on the CPU backend and GPU.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Device,
  GpuError,
  LayerNorm,
  layerNorm,
  layerNormBackward,
  RMSNorm,
  rmsNorm,
  rmsNormBackward,
  tensorStats,
} from "../../mod.ts";
import type { DType, Tensor } from "../../mod.ts";
import { launch, LaunchConfig } from "../../gpu.ts";
import { CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_OUT_OF_MEMORY, FaultDriver } from "../fixtures/fault_driver.ts";
import { randoms } from "../fixtures/helpers.ts";
import { loadBackwardImage, loadNormModule } from "../../ops/kernels.ts";
import { kernelImage, readImage } from "../../ops/images.ts";
import { fusedModuleLoaded, loadFusedImage } from "../../ops/fused_module.ts";
import { FUSED_CUDA_IMAGES, FUSED_QUANT_CUDA_IMAGES } from "../../precompiled/fused_cuda.ts";
import { FAKE_H200 } from "../fixtures/fake_cuda.ts";

// The images loadKernels would read for the fake (an H200: sm_90), read once here: the workflows are synchronous,
// so they load them with loadNormModule and loadBackwardImage (loadKernels' synchronous last steps), a cuModuleLoadData
// like any other.
const SM90 = await kernelImage({ backend: "cuda", info: FAKE_H200 });
const SM90_BWD = await kernelImage({ backend: "cuda", info: FAKE_H200 }, { kind: "backward" });
const FUSED_SM90 = await readImage(FUSED_CUDA_IMAGES.sm_90);
const FUSED_QUANT_SM90 = await readImage(FUSED_QUANT_CUDA_IMAGES.sm_90);

/** A workflow: opens its own Device on the fake, runs, closes everything, returns what it computed. */
type Workflow = (fake: FaultDriver) => unknown;

/** Calls that release something: when one of them fails, that one thing stays allocated (the driver refused). */
const RELEASES = new Set([
  "cuMemFree_v2",
  "cuMemFreeHost",
  "cuStreamDestroy_v2",
  "cuEventDestroy_v2",
  "cuModuleUnload",
  "cuGraphDestroy",
  "cuGraphExecDestroy",
  "cuDevicePrimaryCtxRelease_v2",
]);
/**
 * Calls whose failure an op survives by design: the cluster-occupancy query of the backward (a driver that refuses
 * it gets the portable plan). Only recoverable failures: a sticky one fails the next call.
 */
const SURVIVED = new Set(["cuOccupancyMaxActiveClusters", "cuFuncSetAttribute"]);

const bytesOf = (t: { readSync(): Float32Array }) => Array.from(t.readSync());
const launchesOf = (fake: FaultDriver, from: number) =>
  fake.launches.slice(from).map((l) => `${l.kernel} ${l.grid.join("x")}/${l.block.join("x")}/${l.shared}/${l.cluster}`);

/** Runs `w` on `fake` with a keeper Device holding the context; returns the result, calls made and launches. */
function cleanRun(w: Workflow, fake: FaultDriver): { result: unknown; calls: string[] } {
  const from = fake.calls.length, launched = fake.launches.length;
  const result = w(fake);
  return { result: { result, launches: launchesOf(fake, launched) }, calls: fake.calls.slice(from) };
}

interface Sweep {
  points: number;
  survived: string[];
}

function sweep(name: string, w: Workflow): Sweep {
  const probe = new FaultDriver();
  const keeper = Device.openWithDriver(probe);
  const clean = cleanRun(w, probe);
  const again = cleanRun(w, probe);
  assert.deepEqual(again.result, clean.result, `${name}: a second clean run gives the same result`);
  keeper.close();
  const n = clean.calls.length;
  assert.ok(n > 0, `${name}: makes driver calls`);
  const survived: string[] = [];
  for (let k = 1; k <= n; k++) {
    const call = clean.calls[k - 1];
    const at = `${name}: call ${k}/${n} (${call})`;
    // ---- recoverable ----
    {
      const fake = new FaultDriver();
      const keep = Device.openWithDriver(fake);
      const baseline = fake.live;
      const launched = fake.launches.length;
      fake.failAt(k, CUDA_ERROR_OUT_OF_MEMORY);
      let error: unknown;
      try {
        w(fake);
      } catch (e) {
        error = e;
      }
      if (error === undefined) {
        assert.ok(SURVIVED.has(call), `${at}: the workflow succeeded although ${call} failed`);
        survived.push(call);
      } else {
        assert.ok(error instanceof GpuError, `${at}: ${error}`);
        assert.equal(error.call, call, `${at}: the error names the failed call`);
        assert.equal(error.codeName, "CUDA_ERROR_OUT_OF_MEMORY");
        assert.equal(error.sticky, false);
      }
      const leftover = RELEASES.has(call) && call !== "cuDevicePrimaryCtxRelease_v2" ? 1 : 0;
      // A failed reset (recover()) leaves what it dropped to the next reset: the rerun's recover() frees it.
      if (call !== "cuDevicePrimaryCtxReset_v2") {
        assert.equal(fake.live, baseline + leftover, `${at}: live ${JSON.stringify(fake.liveSummary())}`);
      }
      // The device works again: the same workflow, cleanly, gives the clean result.
      const rerun = cleanRun(w, fake);
      assert.deepEqual(rerun.result, clean.result, `${at}: the rerun after the error`);
      // (A rerun that resets the context frees the leftover too.)
      assert.ok(
        fake.live >= baseline && fake.live <= baseline + leftover,
        `${at}: live after the rerun ${JSON.stringify(fake.liveSummary())}`,
      );
      void launched;
      keep.close();
      assert.equal(fake.retained, call === "cuDevicePrimaryCtxRelease_v2" ? 1 : 0, `${at}: retains`);
    }
    // ---- sticky ----
    {
      const fake = new FaultDriver();
      const keep = Device.openWithDriver(fake);
      fake.failAt(k, CUDA_ERROR_ILLEGAL_ADDRESS);
      let error: unknown;
      try {
        w(fake);
      } catch (e) {
        error = e;
      }
      assert.ok(error instanceof GpuError, `${at} (sticky): ${error}`);
      assert.ok(error.sticky, `${at} (sticky): sticky`);
      assert.equal(error.code, CUDA_ERROR_ILLEGAL_ADDRESS);
      // (recover() names its step: "device.recover(): <call>".)
      assert.ok(
        error.call === call || error.call === `device.recover(): ${call}` ||
          error.message.includes(`since ${call} failed`),
        `${at} (sticky): names the call: ${error.message}`,
      );
      // Every later use: a sticky GpuError saying the process must be restarted; from the second on, no driver call.
      const isSticky = (e: unknown) =>
        e instanceof GpuError && e.sticky && e.code === CUDA_ERROR_ILLEGAL_ADDRESS &&
        /process must be restarted/.test(e.message);
      assert.throws(() => keep.alloc(64), isSticky, `${at} (sticky): alloc after`);
      const before = fake.calls.length;
      assert.throws(() => keep.alloc(64), isSticky);
      assert.throws(() => keep.createStream(), isSticky);
      assert.throws(() => keep.synchronize(), isSticky);
      assert.deepEqual(fake.calls.slice(before), [], `${at} (sticky): no driver calls after the fault`);
      // recover() finds the context still broken: restartRequired from then on, for every Device on the GPU.
      const restart = (e: unknown) =>
        e instanceof GpuError && e.restartRequired && /process must be restarted/.test(e.message);
      assert.throws(() => keep.recover(), restart, `${at} (sticky): recover()`);
      // (Unless the workflow's own recover() met the fault and poisoned the GPU: keep.recover() then resets nothing.)
      if (!error.restartRequired) assert.equal(fake.live, 0, `${at} (sticky): the reset freed everything`);
      const after = fake.calls.length;
      assert.throws(() => keep.alloc(64), restart);
      assert.throws(() => Device.openWithDriver(fake), restart);
      keep.close();
      assert.deepEqual(fake.calls.slice(after), [], `${at} (sticky): nothing reached the driver, close() included`);
    }
  }
  return { points: n, survived };
}

let workflows = 0, faultPoints = 0;
function sweepTest(name: string, w: Workflow): void {
  test(`fault injection at every driver call: ${name}`, () => {
    const r = sweep(name, w);
    workflows++;
    faultPoints += r.points;
    console.log(
      `# ${name}: ${r.points} fault points × 2 codes${
        r.survived.length ? `; survived by design: ${r.survived.join(", ")}` : ""
      }`,
    );
  });
}

// ---- the workflows ----

const LONG = randoms(65536, 14), LONG_W = randoms(65536, 15);
const XL = randoms(2 * 8192, 3), STAGED = randoms(32768, 16), STAGED_W = randoms(32768, 17);
const DY = randoms(256, 5),
  XW = randoms(4 * 4096, 6),
  DYW = randoms(4 * 4096, 7),
  WW = randoms(4096, 8),
  DY2 = randoms(256, 9);
const X = randoms(4 * 64, 11), W = randoms(64, 12).map((v) => 1 + v / 4), B = randoms(64, 13);

sweepTest("open and close", (fake) => {
  using dev = Device.openWithDriver(fake);
  void dev.stream;
  return dev.memoryInfo().total;
});

sweepTest("alloc, fill, copy, read, events", (fake) => {
  using dev = Device.openWithDriver(fake);
  using a = dev.alloc(256), b = dev.alloc(256);
  a.fill(7);
  b.copyFrom(a);
  b.fill32(0x3f800000 >>> 0);
  a.copyFrom(b, { offset: 128, srcOffset: 0, bytes: 64 });
  using ev = dev.createEvent();
  using s = dev.createStream();
  ev.record(dev.stream);
  s.waitEvent(ev);
  s.synchronize();
  const out = new Uint8Array(256);
  a.read(out);
  return Array.from(out);
});

sweepTest("tensor upload and read (f32, f16, bf16, padded rows)", (fake) => {
  using dev = Device.openWithDriver(fake);
  using t32 = dev.tensor(X, [4, 64]);
  using t16 = dev.tensor(X, [4, 64], { dtype: "f16" });
  using tb = dev.tensor(X, [4, 64], { dtype: "bf16" });
  using padded = dev.empty([4, 64], { rowStride: 80 });
  padded.write(X);
  return [bytesOf(t32), bytesOf(t16), bytesOf(tb), bytesOf(padded)];
});

sweepTest("module load, kernel, attributes, launch", (fake) => {
  using dev = Device.openWithDriver(fake);
  using mod = dev.loadModule(new Uint8Array([0x7f, 0x45, 0x4c, 0x46, 1, 2, 3]));
  const k = mod.kernel("scale_f32", ["ptr", "ptr", "f32", "i64"]);
  using x = dev.alloc(1024), y = dev.alloc(1024);
  launch(dev.stream, new LaunchConfig({ grid: [4], block: [256] }), k, x, y, 2, 256);
  launch(dev.stream, new LaunchConfig({ grid: [4], block: [128], sharedBytes: 65536 }), k, x, y, 2, 256);
  const big = new LaunchConfig({ grid: [16], block: [128], cluster: 16 });
  launch(dev.stream, big, k, x, y, 2, 256);
  dev.synchronize();
  return [k.attribute("registers"), k.occupancy(256), k.activeClusters(128, 0, 2)];
});

/** An output buffer's bytes must be its old ones or the clean run's: `run` gets the sentinel-filled `out`. */
function keepsOutput<T>(
  dev: Device,
  fake: FaultDriver,
  shape: number[],
  dtype: DType,
  run: (out: Tensor) => T,
  also: Tensor[] = [],
): T {
  using out = dev.empty(shape, { dtype });
  out.buffer.fill(0x5a);
  const bytes = (t: Tensor) => Array.from(fake.deviceBytes(t.buffer.ptr, t.buffer.byteLength));
  const before = [out, ...also].map(bytes);
  try {
    return run(out);
  } catch (e) {
    assert.deepEqual([out, ...also].map(bytes), before, "outputs given to a failed op keep their bytes");
    throw e;
  }
}

sweepTest("forward: layerNorm and rmsNorm, dtypes, out, stats", (fake) => {
  using dev = Device.openWithDriver(fake);
  loadNormModule(dev, SM90);
  using x = dev.tensor(X, [4, 64]), w = dev.tensor(W, [64]), b = dev.tensor(B, [64]);
  using xh = dev.tensor(X, [4, 64], { dtype: "bf16" });
  using y1 = layerNorm(x, { weight: w, bias: b });
  const r = rmsNorm(xh, { weight: w, stats: true });
  r.y.close(), r.mean.close(), r.rstd.close();
  keepsOutput(dev, fake, [4, 64], "f32", (out) => layerNorm(x, { weight: w, out }));
  using xl = dev.tensor(XL, [2, 8192], { dtype: "f16" });
  using y2 = rmsNorm(xl, { outDtype: "f32" });
  return [y1.shape, y2.dtype];
});

sweepTest("backward: layerNormBackward and rmsNormBackward", (fake) => {
  using dev = Device.openWithDriver(fake);
  loadNormModule(dev, SM90);
  loadBackwardImage(dev, SM90_BWD);
  using x = dev.tensor(X, [4, 64]), w = dev.tensor(W, [64]), b = dev.tensor(B, [64]), dy = dev.tensor(DY, [4, 64]);
  const f = layerNorm(x, { weight: w, bias: b, stats: true });
  using _y = f.y, _m = f.mean, _r = f.rstd;
  const g = layerNormBackward(dy, x, { mean: f.mean, rstd: f.rstd, weight: w, bias: b });
  g.dx.close(), g.dweight?.close(), g.dbias?.close();
  using xw = dev.tensor(XW, [4, 4096], { dtype: "bf16" }), dyw = dev.tensor(DYW, [4, 4096], { dtype: "bf16" });
  using ww = dev.tensor(WW, [4096]);
  const fr = rmsNorm(xw, { weight: ww, stats: true });
  using _y2 = fr.y, _m2 = fr.mean, _r2 = fr.rstd;
  using dweight = dev.tensor(new Float32Array(4096), [4096]);
  const gr = keepsOutput(
    dev,
    fake,
    [4, 4096],
    "bf16",
    (dx) => rmsNormBackward(dyw, xw, { rstd: fr.rstd, weight: ww, dx, dweight, accumulate: true }),
    [dweight],
  );
  // Long rows: the cluster kernels, whose plan asks the driver how many clusters fit.
  using xc = dev.tensor(LONG, [1, 65536], { dtype: "bf16" }), wc = dev.tensor(LONG_W, [65536]);
  const fc = layerNorm(xc, { weight: wc, stats: true });
  using _y3 = fc.y, _m3 = fc.mean, _r3 = fc.rstd;
  const gc = layerNormBackward(xc, xc, { mean: fc.mean, rstd: fc.rstd, weight: wc });
  gc.dx.close(), gc.dweight?.close();
  return [g.dx.shape, gr.dweight?.shape];
});

sweepTest("backward: staged cluster kernels (the plan asks whether a cluster fits)", (fake) => {
  using dev = Device.openWithDriver(fake);
  loadNormModule(dev, SM90);
  loadBackwardImage(dev, SM90_BWD);
  using x = dev.tensor(STAGED, [1, 32768], { dtype: "bf16" }), w = dev.tensor(STAGED_W, [32768], { dtype: "bf16" });
  const f = rmsNorm(x, { weight: w, stats: true });
  using _y = f.y, _m = f.mean, _r = f.rstd;
  const g = rmsNormBackward(x, x, { rstd: f.rstd, weight: w });
  g.dx.close(), g.dweight?.close();
  return g.dx.shape;
});

sweepTest("fused: residual + fp8, QK over a head view, batchInvariant, dResidual backward, module", (fake) => {
  using dev = Device.openWithDriver(fake);
  loadNormModule(dev, SM90);
  loadBackwardImage(dev, SM90_BWD);
  loadFusedImage(dev, FUSED_SM90);
  loadFusedImage(dev, FUSED_QUANT_SM90, "fusedQuant");
  using x = dev.tensor(X, [4, 64], { dtype: "bf16" }), res = dev.tensor(DY, [4, 64], { dtype: "bf16" });
  using w = dev.tensor(W, [64]);
  using scales = dev.empty([4]);
  keepsOutput(
    dev,
    fake,
    [4, 64],
    "fp8e4m3",
    (out) =>
      rmsNorm(x, { weight: w, residual: res, residualOut: res, out, quant: { dtype: "fp8e4m3", scaleOut: scales } }),
  );
  using q = rmsNorm(x, { weight: w, quant: { dtype: "int8" } });
  const qk = x.view([2, 2, 64], { strides: [128, 64, 1] });
  rmsNorm(qk, { weight: w, weight2: w, split: 1, out: qk });
  using y = layerNorm(x, { weight: w, batchInvariant: true });
  const f = rmsNorm(x, { weight: w, residual: res, stats: true });
  using _y = f.y, _m = f.mean, _r = f.rstd;
  const g = rmsNormBackward(x, res, { rstd: f.rstd, weight: w, dResidual: x });
  g.dx.close(), g.dweight?.close();
  using m = new RMSNorm(dev, 64);
  using _ym = m.forward(x, { residual: res });
  using dxm = m.backward(x, { dResidual: res });
  return [q.y.dtype, y.shape, dxm.shape];
});

sweepTest("modules: RMSNorm and LayerNorm forward, backward, zeroGrad", (fake) => {
  using dev = Device.openWithDriver(fake);
  loadNormModule(dev, SM90);
  loadBackwardImage(dev, SM90_BWD);
  using rms = new RMSNorm(dev, 64, { zeroCentered: true });
  using ln = new LayerNorm(dev, 64);
  rms.load({ weight: W.map((v) => v - 1) });
  ln.load({ weight: W, bias: B });
  using x = dev.tensor(X, [4, 64]), dy = dev.tensor(DY2, [4, 64]);
  for (const m of [rms, ln]) {
    using y = m.forward(x);
    using dx = m.backward(dy);
    void y, dx;
    m.zeroGrad();
  }
  const s = ln.state();
  return [Array.from(s.weight!), Array.from(s.bias!), Array.from(s.weightGrad!), Array.from(rms.state().weight!)];
});

sweepTest("graph capture, instantiate, launch, update", (fake) => {
  using dev = Device.openWithDriver(fake);
  loadNormModule(dev, SM90);
  using s = dev.createStream();
  using x = dev.tensor(X, [4, 64]), w = dev.tensor(W, [64]), y = dev.empty([4, 64]), y2 = dev.empty([4, 64]);
  rmsNorm(x, { weight: w, out: y, stream: s }); // loads the kernel and caches the plan before the capture
  using g = s.capture(() => rmsNorm(x, { weight: w, out: y, stream: s }));
  using exec = g.instantiate();
  exec.launch(s);
  using g2 = s.capture(() => {
    rmsNorm(x, { weight: w, out: y2, stream: s });
  });
  exec.update(g2);
  exec.launch(s);
  s.synchronize();
  return exec.handle !== 0n;
});

sweepTest("pinned memory and async copies", (fake) => {
  using dev = Device.openWithDriver(fake);
  using pin = dev.pinned(256), back = dev.pinned(256);
  pin.bytes.set(Uint8Array.from({ length: 256 }, (_, i) => (i * 7) & 255));
  using buf = dev.alloc(256);
  using s = dev.createStream();
  buf.writeAsync(pin, { stream: s });
  buf.readAsync(back, { stream: s, bytes: 128 });
  buf.readAsync(back, { stream: s, offset: 128, pinnedOffset: 128 });
  s.synchronize();
  return Array.from(back.bytes);
});

sweepTest("check mode (diagnostics)", (fake) => {
  using dev = Device.openWithDriver(fake);
  loadNormModule(dev, SM90);
  using x = dev.tensor(X, [4, 64]), w = dev.tensor(W, [64]);
  using _y = layerNorm(x, { weight: w, check: true });
  const report = dev.lastCheck!;
  const stats = tensorStats(x);
  return [report.op, report.input.count, report.output.count, stats.count];
});

sweepTest("recover() of a healthy device, then use", (fake) => {
  using dev = Device.openWithDriver(fake);
  const before = dev.alloc(64);
  dev.recover();
  assert.ok(before.closed);
  using x = dev.tensor(X, [4, 64]);
  return bytesOf(x);
});

test("recover(): both fused modules come back from their images at the next fused call of each kind", () => {
  using dev = Device.openWithDriver(new FaultDriver());
  loadNormModule(dev, SM90);
  loadFusedImage(dev, FUSED_SM90);
  loadFusedImage(dev, FUSED_QUANT_SM90, "fusedQuant");
  dev.recover();
  assert.deepEqual([fusedModuleLoaded(dev), fusedModuleLoaded(dev, "fusedQuant")], [false, false]);
  using x = dev.tensor(X, [4, 64], { dtype: "bf16" }), res = dev.tensor(DY, [4, 64], { dtype: "bf16" });
  using w = dev.tensor(W, [64]);
  rmsNorm(x, { weight: w, residual: res, out: x });
  assert.deepEqual([fusedModuleLoaded(dev), fusedModuleLoaded(dev, "fusedQuant")], [true, false]);
  using q = rmsNorm(x, { weight: w, quant: { dtype: "int8", scale: 0.1 } });
  assert.deepEqual([fusedModuleLoaded(dev), fusedModuleLoaded(dev, "fusedQuant"), q.dtype], [true, true, "int8"]);
});

test("fault injection: counts", () => {
  assert.equal(workflows, 13, "every workflow above was swept");
  assert.ok(faultPoints > 100, `${faultPoints} fault points`);
  console.log(
    `# fault injection: ${workflows} workflows, ${faultPoints} fault points, each failed once recoverable and once sticky`,
  );
});

test("a transient failure of the cluster-fit query (out of memory) is not remembered: the next backward asks again and gets the staged cluster plan", () => {
  const fake = new FaultDriver();
  using dev = Device.openWithDriver(fake);
  loadNormModule(dev, SM90);
  loadBackwardImage(dev, SM90_BWD);
  using x = dev.tensor(STAGED, [1, 32768], { dtype: "bf16" }), w = dev.tensor(STAGED_W, [32768], { dtype: "bf16" });
  const f = rmsNorm(x, { weight: w, stats: true });
  using _y = f.y, _m = f.mean, _r = f.rstd;
  const backwardKernel = () => {
    const from = fake.launches.length;
    const g = rmsNormBackward(x, x, { rstd: f.rstd, weight: w });
    g.dx.close(), g.dweight?.close();
    return fake.launches[from].kernel;
  };
  // Fail the first cluster-fit query: that call falls back to another plan.
  const before = fake.calls.length;
  fake.failNext("cuOccupancyMaxActiveClusters");
  const fallback = backwardKernel();
  assert.ok(fake.calls.slice(before).includes("cuOccupancyMaxActiveClusters"), "the query was made (and failed)");
  assert.doesNotMatch(fallback, /staged/);
  assert.equal(backwardKernel(), "nk_rms_bwd_clusterstaged_bf16_bf16_bf16", "the next call asks again");
});

/**
 * Programmatic dependent launch (PDL): which kernels ask for it, on which devices, and the switch.
 *
 * CPU half (here, in CI): the fake CUDA driver of tests/fixtures/fake_cuda.ts records each launch's `dependent` flag;
 * the kernel source is read to check that every kernel the runtime flags waits (nk_pdl_enter) before touching
 * memory. GPU half: tests/gpu/norm_forward.test.ts chains norms that read each other's output, eagerly and in a graph.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  ArgumentError,
  cpuNormForward,
  Device,
  layerNorm,
  loadKernels,
  rmsNorm,
  setDependentLaunch,
  UnsupportedError,
} from "../../mod.ts";
import type { Stream } from "../../gpu.ts";
import { FAKE_H200, fakeCudaDevice } from "../fixtures/fake_cuda.ts";
import { dependentLaunchByDefault, dependentLaunchSupported, NORM_FWD_ARGS, normKernel } from "../../ops/kernels.ts";
import { NORM_BWD_KERNELS, NORM_KERNELS } from "../../precompiled/norm_cuda.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";

/**
 * The kernels whose entry runs nk_pdl_enter() (griddepcontrol.wait before any memory access; kernels/norm.cu):
 * the forward, backward and finalize kernels. Not the diagnostics kernels nor scale_f32.
 */
function hasDependentLaunchEntry(name: string): boolean {
  return /^nk_(ln|rms)_/.test(name) || name.startsWith("nk_bwd_finalize_");
}

function fakeWith(info = FAKE_H200) {
  return fakeCudaDevice((dev) => {
    const x = dev.tensor(Array.from({ length: 8 * 256 }, (_, i) => Math.sin(i)), [8, 256], { dtype: "bf16" });
    const w = dev.tensor(Array.from({ length: 256 }, (_, i) => 1 + i / 256), [256], { dtype: "bf16" });
    const y = dev.empty([8, 256], { dtype: "bf16" });
    return { x, w, y };
  }, { record: true, info });
}

test("fake H200 (sm_90): every norm launch asks for programmatic dependent launch; setDependentLaunch turns it off and on", async () => {
  const { dev, made: m, launches } = await fakeWith();
  try {
    rmsNorm(m.x, { weight: m.w, out: m.y });
    layerNorm(m.x, { weight: m.w, out: m.y });
    assert.deepEqual(launches.map((l) => l.dependent), [true, true]);
    assert.equal(setDependentLaunch(dev, false), false);
    rmsNorm(m.x, { weight: m.w, out: m.y }); // a cached kernel: updated by the switch
    layerNorm(m.x, { out: m.y }); // a kernel not used before: made with the switch off
    assert.deepEqual(launches.slice(2).map((l) => l.dependent), [false, false]);
    assert.equal(setDependentLaunch(dev, true), true);
    rmsNorm(m.x, { weight: m.w, out: m.y });
    layerNorm(m.x, { out: m.y });
    assert.deepEqual(launches.slice(4).map((l) => l.dependent), [true, true]);
    assert.throws(
      () => setDependentLaunch(dev, 1 as never),
      (e: unknown) => e instanceof ArgumentError && e.argument === "on",
    );
  } finally {
    dev.close();
  }
});

test("fake A100 (sm_80 SASS, no griddepcontrol): no dependent launches, and the switch cannot turn them on", async () => {
  const a100 = { ...FAKE_H200, name: "fake A100", arch: "sm_80", computeCapability: [8, 0] as [number, number] };
  const { dev, made: m, launches } = await fakeWith(a100);
  try {
    assert.equal(dependentLaunchSupported(dev), false);
    rmsNorm(m.x, { weight: m.w, out: m.y });
    assert.equal(setDependentLaunch(dev, true), false);
    layerNorm(m.x, { weight: m.w, out: m.y });
    assert.deepEqual(launches.map((l) => l.dependent), [false, false]);
    // The low-level switch refuses where the hardware has none.
    const k = normKernel(dev, "nk_rms_rows_bf16_bf16_bf16", NORM_FWD_ARGS);
    assert.throws(() => (k.dependentLaunch = true), UnsupportedError);
    assert.throws(
      () => (k.dependentLaunch = "yes" as never),
      (e: unknown) => e instanceof ArgumentError && e.argument === "dependentLaunch",
    );
  } finally {
    dev.close();
  }
});

test("only the H200-class fatbin code (sm_90 SASS) has the wait: cc 9.0 CUDA yes; 8.x, 10.0, 12.0, HIP, CPU no", () => {
  const at = (backend: string, cc: [number, number]) =>
    dependentLaunchSupported({ backend, info: { ...FAKE_H200, computeCapability: cc } });
  assert.equal(at("cuda", [9, 0]), true);
  for (const cc of [[8, 0], [8, 6], [8, 9], [10, 0], [12, 0]] as [number, number][]) {
    assert.equal(at("cuda", cc), false, cc.join("."));
  }
  assert.equal(at("hip", [9, 0]), false);
  const cpu = Device.open({ backend: "cpu", sanityCheck: false });
  try {
    assert.equal(dependentLaunchSupported(cpu), false);
    assert.equal(setDependentLaunch(cpu, true), false);
  } finally {
    cpu.close();
  }
});

test("kernel source: the kernels that start with nk_pdl_enter() are exactly those hasDependentLaunchEntry names; only forward ones are launched with it", () => {
  const src = readFileSync(new URL("../../kernels/norm.cu", import.meta.url), "utf8").split("\n");
  const seen: string[] = [];
  for (let i = 0; i < src.length; i++) {
    const m = /extern "C" NK_GLOBAL void .*?\b((?:nk_|scale_)[\w#]+)\(/.exec(src[i]);
    if (!m) continue;
    // Macro names: nk_##kind##_##map##_##ti##_##to##_##tw -> nk_ln_..., the pattern the runtime matches.
    const name = m[1].replace("##kind##", "ln").replaceAll("#", "");
    const waits = /^\s*nk_pdl_enter\(\);/.test(src[i + 1]);
    assert.equal(waits, hasDependentLaunchEntry(name), `${name}: nk_pdl_enter() ${waits ? "present" : "missing"}`);
    seen.push(name);
  }
  assert.ok(seen.length >= 10, `kernel definitions found: ${seen.join(", ")}`);
  // Every built kernel is classified; the diagnostics and scale kernels are not flagged.
  const all = [...NORM_KERNELS, ...NORM_BWD_KERNELS];
  const waiting = all.filter(hasDependentLaunchEntry);
  assert.equal(waiting.length, all.length - 5, "all but scale_f32 and the 4 diagnostics kernels");
  for (const n of ["scale_f32", "nk_diag_partial_f32", "nk_diag_final"]) {
    assert.equal(hasDependentLaunchEntry(n), false, n);
  }
  // Launched with it by default: the 255 forward kernels (LayerNorm's 30 vector-only, 15 two-pass and 15 tile ones,
  // RMSNorm's 15 tile ones included), every one of which waits.
  const byDefault = all.filter(dependentLaunchByDefault);
  assert.equal(byDefault.length, 255);
  assert.ok(byDefault.every(hasDependentLaunchEntry));
  assert.ok(!NORM_BWD_KERNELS.some(dependentLaunchByDefault));
});

/**
 * `chain` with dependent launch on, then off (as far as the device allows), each eagerly and as a CUDA graph: `reset`
 * before each run, `check(what)` after it (the stream synchronized by the check's reads).
 */
function eachLaunchMode(
  dev: Device,
  stream: Stream,
  reset: () => void,
  chain: () => void,
  check: (what: string) => void,
) {
  for (const on of [true, false]) {
    const effective = setDependentLaunch(dev, on);
    assert.equal(effective, on && dependentLaunchSupported(dev));
    reset();
    chain();
    check(`eager, dependent launch ${effective}`);
    using graph = stream.capture(chain);
    using exec = graph.instantiate();
    reset();
    exec.launch(stream);
    check(`graph, dependent launch ${effective}`);
  }
}

// ---- on the GPU: order is kept when every launch may overlap the previous one ------------------------------

/**
 * A chain of `steps` norms over two ping-pong buffers, each reading the output of the one before (alternating
 * LayerNorm and RMSNorm, a different weight per step): a kernel that read its input before the previous one
 * finished would see a value from two steps back. f32 throughout; the float64 chain rounds to f32 after each
 * step, as the device does. Tolerance after 40 steps: |y − ref| ≤ 1e-4 · (1 + |ref|) (one step's f32 error is
 * ~1e-6 relative; a lost dependency moves values by O(1)).
 */
gpuTest(
  "GPU: 40 chained norms (each reads the previous output) match the float64 chain, dependent launch on and off, eager and graph",
  async () => {
    using dev = Device.open({ sanityCheck: false });
    await loadKernels(dev);
    const stream = dev.createStream();
    try {
      const steps = 40;
      // latency mapping (4 rows), rows and block mappings (270 rows: past 2 per SM on the H200), cluster (f32 D = 65536 on sm_90)
      for (const [rows, d] of [[4, 256], [270, 256], [270, 4096], [4, 65536]]) {
        const x0 = Float64Array.from(randoms(rows * d, d, -3, 3), Math.fround);
        const ws = Array.from({ length: steps }, (_, i) => Float64Array.from(randoms(d, d + i, 0.5, 1.5), Math.fround));
        let ref = x0;
        for (let i = 0; i < steps; i++) {
          const kind = i % 2 ? "rms" : "layer";
          const r = cpuNormForward({
            kind,
            rows,
            d,
            x: ref,
            xStride: d,
            weight: ws[i],
            eps: kind === "layer" ? 1e-5 : 1e-6,
          });
          ref = Float64Array.from(r.y, Math.fround);
        }
        using a = dev.empty([rows, d], { dtype: "f32" });
        using b = dev.empty([rows, d], { dtype: "f32" });
        const w = ws.map((v) => dev.tensor(v, [d], { dtype: "f32" }));
        try {
          const chain = () => {
            for (let i = 0; i < steps; i++) {
              const [src, dst] = i % 2 ? [b, a] : [a, b];
              if (i % 2) rmsNorm(src, { weight: w[i], out: dst, stream });
              else layerNorm(src, { weight: w[i], out: dst, stream });
            }
          };
          const check = (what: string) => {
            const got = (steps % 2 ? b : a).readSync({ stream });
            let worst = 0;
            for (let i = 0; i < got.length; i++) {
              worst = Math.max(worst, Math.abs(got[i] - ref[i]) / (1 + Math.abs(ref[i])));
            }
            assert.ok(worst <= 1e-4, `D=${d} ${what}: worst relative error ${worst}`);
          };
          const reset = () => {
            a.write(x0, { stream });
            b.buffer.fill(0xff, { stream });
          };
          eachLaunchMode(dev, stream, reset, chain, check);
        } finally {
          for (const t of w) t.close();
        }
      }
    } finally {
      setDependentLaunch(dev, true);
      stream.close();
    }
  },
);

/**
 * The fused kernels in a chain: each step adds its x to a residual stream in place and normalizes the sum into the
 * other ping-pong buffer, which is the next step's x (alternating LayerNorm and RMSNorm, a weight per step); the last
 * step quantizes (int8, dynamic). Every step reads both tensors the step before wrote, so a kernel that touched memory
 * before the previous one finished would see values from two steps back. The same calls on the CPU backend (float64
 * maths, f32 rounding of h and y) are the reference. Shapes: decode rows on the `_nv2`, `_nv4` and 8-chunk kernels
 * (f32 D 2048, 4096, 8192 at 4 rows) and prefill rows (270 × 4096). Tolerance: |GPU − CPU| ≤ 1e-4 · (1 + |CPU|) for
 * y and the residual (a step's f32 error is ~1e-6 relative; a lost dependency moves values by O(1)), q within one step
 * and the scales within 1e-4 relative.
 */
gpuTest(
  "GPU: 24 chained fused add + norm steps then int8 match the CPU backend, dependent launch on and off, eager and graph",
  async () => {
    using dev = Device.open({ backend: "cuda", sanityCheck: false });
    await loadKernels(dev, { quant: true });
    using cpu = Device.open({ backend: "cpu" });
    const stream = dev.createStream();
    const steps = 24;
    try {
      for (const [rows, d] of [[4, 2048], [4, 4096], [4, 8192], [270, 4096]]) {
        const x0 = randoms(rows * d, d, -3, 3), r0 = randoms(rows * d, d + 1, -1, 1);
        const wv = Array.from({ length: steps }, (_, i) => randoms(d, d + 2 + i, 0.5, 1.5));
        const run = (device: Device, stream?: Stream) => {
          const a = device.tensor(x0, [rows, d]), b = device.empty([rows, d]), res = device.tensor(r0, [rows, d]);
          const w = wv.map((v) => device.tensor(v, [d]));
          const q = device.empty([rows, d], { dtype: "int8" }), scale = device.empty([rows]);
          const chain = () => {
            for (let i = 0; i < steps; i++) {
              const [src, dst] = i % 2 ? [b, a] : [a, b];
              const o = { weight: w[i], residual: res, out: dst, stream };
              if (i % 2) rmsNorm(src, o);
              else layerNorm(src, o);
            }
            rmsNorm(a, { weight: w[0], out: q, quant: { dtype: "int8", scaleOut: scale }, stream });
          };
          const reset = () => {
            a.write(x0, { stream });
            res.write(r0, { stream });
            b.buffer.fill(0xff, { stream });
            q.buffer.fill(0x55, { stream });
            scale.buffer.fill(0xff, { stream });
          };
          const read = () => ({
            y: a.readSync({ stream }),
            res: res.readSync({ stream }),
            q: q.readSync({ stream }),
            scale: scale.readSync({ stream }),
          });
          return { chain, reset, read, close: () => [a, b, res, q, scale, ...w].forEach((t) => t.close()) };
        };
        const ref = run(cpu);
        ref.reset();
        ref.chain();
        const want = ref.read();
        ref.close();
        const gpu = run(dev, stream);
        try {
          const check = (what: string) => {
            const got = gpu.read();
            for (const k of ["y", "res"] as const) {
              for (let i = 0; i < got[k].length; i++) {
                const tol = 1e-4 * (1 + Math.abs(want[k][i]));
                if (!(Math.abs(got[k][i] - want[k][i]) <= tol)) {
                  assert.fail(`${rows}×${d} ${what}: ${k}[${i}] = ${got[k][i]}, CPU ${want[k][i]}`);
                }
              }
            }
            for (let i = 0; i < got.q.length; i++) {
              if (!(Math.abs(got.q[i] - want.q[i]) <= 1)) {
                assert.fail(`${rows}×${d} ${what}: q[${i}] = ${got.q[i]}, CPU ${want.q[i]}`);
              }
            }
            for (let i = 0; i < rows; i++) {
              const rel = Math.abs(got.scale[i] - want.scale[i]) / want.scale[i];
              assert.ok(rel <= 1e-4, `${rows}×${d} ${what}: scale[${i}] = ${got.scale[i]}, CPU ${want.scale[i]}`);
            }
          };
          eachLaunchMode(dev, stream, gpu.reset, gpu.chain, check);
        } finally {
          gpu.close();
        }
      }
    } finally {
      setDependentLaunch(dev, true);
      stream.close();
    }
  },
);

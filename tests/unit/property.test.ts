/**
 * Property tests with fast-check: random shapes (rank 1–3), row strides and offsets, dtypes (input,
 * output, weight), eps, affine flags, output placement (new / given with its own stride / in place), stats,
 * data scale and shift (stats always returned and checked), against the float64 reference (ops/cpu.ts) computed from the values the device
 * actually stores (read back, so f16/bf16 rounding of the inputs is not counted as error).
 *
 *   CPU backend (CI), 200 cases: the result must be exactly the reference rounded to the output dtype
 *     (the CPU backend is that reference: this checks strides, offsets, dtype plumbing and in-place).
 *   CUDA (gpuTest), 1000 cases, tolerances as tests/gpu/norm_forward.test.ts:
 *     f32 output |y − ref| ≤ 1e-5·(1+|ref|); f16/bf16 |y − round(ref)| ≤ 1 ulp(ref) + 1e-6·(1+|ref|);
 *     rstd within 1e-5 relative, mean within 1e-5·(1+|mean|).
 * Fixed seeds: a failure prints the counterexample and the seed/path to replay it.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { cpuNormForward, Device, type DType, layerNorm, rmsNorm, Tensor } from "../../mod.ts";
import { roundTo, ulpOf } from "../../runtime/dtype.ts";
import { gpuTest } from "../fixtures/helpers.ts";
import { mulberry32 } from "../fixtures/random.ts";
import process from "node:process";

// NORMKIT_PROPERTY_RUNS lowers the CUDA case count (e.g. under compute-sanitizer, which slows every launch down); 1000 by default.
const GPU_RUNS = Number(process.env.NORMKIT_PROPERTY_RUNS ?? 1000);

const DTYPE_LIST: DType[] = ["f32", "f16", "bf16"];

interface Case {
  kind: "layer" | "rms";
  lead: number[];
  d: number;
  tin: DType;
  tout: DType;
  weight: boolean;
  bias: boolean;
  wInputDtype: boolean;
  xPad: number;
  xOffset: number;
  outMode: "new" | "given" | "inplace";
  outPad: number;
  eps: number;
  scale: number;
  shift: number;
  seed: number;
}

function caseArb(maxD: number): fc.Arbitrary<Case> {
  return fc.record({
    kind: fc.constantFrom("layer" as const, "rms" as const),
    lead: fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 0, maxLength: 2 }),
    d: fc.oneof(
      { weight: 5, arbitrary: fc.integer({ min: 1, max: 64 }) },
      { weight: 4, arbitrary: fc.integer({ min: 65, max: 4096 }) },
      { weight: 1, arbitrary: fc.integer({ min: 4097, max: maxD }) },
    ),
    tin: fc.constantFrom(...DTYPE_LIST),
    tout: fc.constantFrom(...DTYPE_LIST),
    weight: fc.boolean(),
    bias: fc.boolean(),
    wInputDtype: fc.boolean(),
    xPad: fc.integer({ min: 0, max: 5 }),
    xOffset: fc.integer({ min: 0, max: 3 }),
    outMode: fc.constantFrom("new" as const, "given" as const, "inplace" as const),
    outPad: fc.integer({ min: 0, max: 4 }),
    eps: fc.double({ min: 1e-7, max: 0.1, noNaN: true }),
    scale: fc.constantFrom(0.01, 1, 100),
    shift: fc.constantFrom(0, 1, 10),
    seed: fc.integer({ min: 0, max: 0x7fffffff }),
  });
}

/** At most this many elements per case: large D comes with few rows. */
const MAX_ELEMENTS = 300_000;

/** Runs one case on `dev`; returns nothing, fails with the case in the message. `exact`: CPU backend. */
function runCase(dev: Device, c: Case, exact: boolean): void {
  let lead = c.lead;
  const leadRows = lead.reduce((a, n) => a * n, 1);
  if (leadRows * c.d > MAX_ELEMENTS) lead = [Math.max(1, Math.floor(MAX_ELEMENTS / c.d))];
  const shape = [...lead, c.d];
  const rows = lead.reduce((a, n) => a * n, 1), d = c.d;
  const outMode = c.outMode === "inplace" && c.tout !== c.tin ? "given" : c.outMode;
  const tout = outMode === "inplace" ? c.tin : c.tout;
  const next = mulberry32(c.seed);
  const values = Float32Array.from({ length: rows * d }, () => c.scale * (next() * 2 - 1 + c.shift));
  const tw: DType = c.wInputDtype ? c.tin : "f32";
  const label = JSON.stringify({ ...c, lead, tout, outMode });

  // x inside a larger buffer: element offset and padded rows.
  const xStride = d + c.xPad;
  const bpe = c.tin === "f32" ? 4 : 2;
  using xbuf = dev.alloc((c.xOffset + (rows - 1) * xStride + d) * bpe);
  const x = new Tensor(xbuf, shape, { dtype: c.tin, rowStride: xStride, offset: c.xOffset });
  x.write(values);
  const xin = x.readSync(); // what the device holds
  using w = c.weight ? dev.tensor(Float32Array.from({ length: d }, () => 0.5 + next()), [d], { dtype: tw }) : undefined;
  using b = c.bias && c.kind === "layer" ? dev.tensor(Float32Array.from({ length: d }, () => next() * 2 - 1), [d], { dtype: tw }) : undefined;
  using given = outMode === "given" ? dev.empty(shape, { dtype: tout, rowStride: d + c.outPad }) : undefined;
  given?.buffer.fill(0xff); // NaN in every dtype: an unwritten element fails
  const out = outMode === "inplace" ? x : given;
  const opts = { weight: w, bias: b, eps: c.eps, out, outDtype: tout };
  const r = c.kind === "layer" ? layerNorm(x, { ...opts, stats: true }) : rmsNorm(x, { ...opts, stats: true });
  try {
    if (out) assert.equal(r.y, out, "the result is `out`");
    assert.deepEqual(r.y.shape, shape);
    const got = r.y.readSync();
    const ref = cpuNormForward({
      kind: c.kind, rows, d, x: xin, xStride: d, weight: w?.readSync(), bias: b?.readSync(), eps: c.eps,
    });
    for (let i = 0; i < rows * d; i++) {
      const e = ref.y[i];
      const want = tout === "f32" ? (exact ? roundTo(e, "f32") : e) : roundTo(e, tout);
      const tol = exact ? 0 : tout === "f32" ? 1e-5 * (1 + Math.abs(e)) : ulpOf(e, tout) + 1e-6 * (1 + Math.abs(e));
      if (!(Math.abs(got[i] - want) <= tol)) {
        assert.fail(`${label}: y[${Math.floor(i / d)}][${i % d}] = ${got[i]}, expected ${want} (float64 ${e}, tolerance ${tol})`);
      }
    }
    const mean = r.mean.readSync(), rstd = r.rstd.readSync();
    for (let row = 0; row < rows; row++) {
      const rs = exact ? 0 : 1e-5 * ref.rstd[row], ms = exact ? 0 : 1e-5 * (1 + Math.abs(ref.mean[row]));
      if (!(Math.abs(rstd[row] - roundTo(ref.rstd[row], "f32")) <= rs)) assert.fail(`${label}: rstd[${row}] = ${rstd[row]}, float64 ${ref.rstd[row]}`);
      if (!(Math.abs(mean[row] - roundTo(ref.mean[row], "f32")) <= ms)) assert.fail(`${label}: mean[${row}] = ${mean[row]}, float64 ${ref.mean[row]}`);
    }
  } finally {
    if (!out) r.y.close();
    r.mean.close();
    r.rstd.close();
  }
}

test("property (CPU backend, 200 cases): any shape/stride/offset/dtypes/eps/affine/out placement = float64 reference exactly", () => {
  using dev = Device.open({ backend: "cpu", sanityCheck: false });
  fc.assert(fc.property(caseArb(20_000), (c) => runCase(dev, c, true)), { numRuns: 200, seed: 20261129 });
  assert.equal(dev.owner.liveCount, 1, "every case closed what it made (the default stream remains)");
});

gpuTest(`property (CUDA, ${GPU_RUNS} cases): any shape/stride/offset/dtypes/eps/affine/out placement within tolerance of float64`, () => {
  using dev = Device.open({ backend: "cuda" });
  const live = (() => {
    void dev.stream;
    return dev.owner.liveCount;
  })();
  let cases = 0;
  const t0 = performance.now();
  fc.assert(
    fc.property(caseArb(262_144), (c) => {
      cases++;
      runCase(dev, c, false);
    }),
    { numRuns: GPU_RUNS, seed: 20261130 },
  );
  console.log(`# property: ${cases} CUDA cases, 0 mismatches, ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  // Every case's tensors were closed (the sanity check at open already loaded the norm module).
  assert.equal(dev.owner.liveCount, live, "every case closed what it made");
});

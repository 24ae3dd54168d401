/**
 * The fused calls the split sweep (sweep.ts) and the kernel A/B (ab.ts) time: 16-bit rows (bf16 unless the A/B's `--x
 * f16`; weights and bias of x's dtype) with a residual written out of
 * place, and plain norms on the same kernels (no residual, no h: what `batchInvariant: true` runs where
 * planNormInvariant has no tuned plan), through the op (the plain norms: in the op's fused plan) or launched directly
 * with a chosen kernel and geometry (arguments packed by fusedArgs as the op packs them), and their outputs' bits.
 */
import process from "node:process";
import { type Device, type DType, layerNorm, loadKernels, rmsNorm } from "../../mod.ts";
import { type Kernel, LaunchConfig, type Stream } from "../../gpu.ts";
import { fusedArgs } from "../../ops/fused_abi.ts";
import { type FusedGeometry, fusedGeometry, fusedKernelFor } from "../../ops/plan_fused.ts";
import { fusedKernel } from "../../ops/fused_module.ts";
import { planLimits } from "../../ops/kernels.ts";
import { fillFromTile, randomTile } from "../../bench/tile.ts";
import { copyCeilingGBs, deviceTimer } from "../../bench/device_timer.ts";
import { openCuda } from "../../bench/open_cuda.ts";
import { fromBf16Bits, fromF16Bits } from "../../runtime/dtype.ts";
import { graphUs } from "../../bench/device_timer.ts";

/** The value after `--name` on the command line, if given. */
export function option(name: string): string | undefined {
  const args = process.argv.slice(2);
  return args.includes(name) ? args[args.indexOf(name) + 1] : undefined;
}

/** A lab script's GPU: CUDA with the fused kernels loaded, a device timer, the copy ceiling of this run, the plan's
 * limits and the random tile the cases draw from. Disposing it releases the timer, then the device. */
export async function openLab(script: string) {
  const stack = new DisposableStack();
  try {
    const dev = stack.use(openCuda(script));
    await loadKernels(dev, { quant: true });
    const timer = stack.use(deviceTimer(dev, 10));
    const lab = { dev, timer, copyGBs: copyCeilingGBs(dev, timer), limits: planLimits(dev), tile: randomTile(3) };
    const owned = stack.move();
    return { ...lab, [Symbol.dispose]: () => owned.dispose() };
  } finally {
    stack.dispose();
  }
}

/** A call: its norm, y in x's dtype ("x") or fp8e4m3 with dynamic scales, a residual or none. */
export type Variant = { name: string; kind: "rms" | "layer"; to: "x" | "fp8e4m3"; residual: boolean };
export const VARIANTS: readonly Variant[] = [
  { name: "add+rms", kind: "rms", to: "x", residual: true },
  { name: "add+rms+fp8", kind: "rms", to: "fp8e4m3", residual: true },
  { name: "add+ln", kind: "layer", to: "x", residual: true },
  { name: "add+ln+fp8", kind: "layer", to: "fp8e4m3", residual: true },
  { name: "rms-inv", kind: "rms", to: "x", residual: false },
  { name: "ln-inv", kind: "layer", to: "x", residual: false },
];
/** eps of the op and of the direct launches alike. */
export const EPS = 1e-6;
/** The 16-bit dtypes of x (and residual, h, a float y, weight and bias) the cases take. */
export type X16 = "bf16" | "f16";

/** x, residual, weight and bias (dtype `xd`) from `tile`; h, y (`xd` and fp8) and the scales left to the call. */
export function caseTensors(
  dev: Device,
  held: DisposableStack,
  tile: Float32Array,
  rows: number,
  d: number,
  xd: X16 = "bf16",
) {
  const make = (dtype: DType, fill: boolean, shape = [rows, d]) => {
    const t = held.use(dev.empty(shape, { dtype }));
    if (fill) fillFromTile(t, tile);
    return t;
  };
  return {
    x: make(xd, true),
    r: make(xd, true),
    h: make(xd, false),
    y16: make(xd, false),
    y8: make("fp8e4m3", false),
    scale: make("f32", false, [rows]),
    w: held.use(dev.tensor(tile.subarray(0, d).map((v) => 1 + v / 8), [d], { dtype: xd })),
    b: held.use(dev.tensor(tile.subarray(d, 2 * d), [d], { dtype: xd })),
  };
}
export type CaseTensors = ReturnType<typeof caseTensors>;
/** The dtype of v's y on x of dtype `x`, and the tensor that receives it. */
export const yDtype = (v: Variant, x: X16): X16 | "fp8e4m3" => v.to === "x" ? x : v.to;
const yOf = (t: CaseTensors, v: Variant) => v.to === "x" ? t.y16 : t.y8;

/**
 * The op itself: residual out of place, dynamic scales for fp8. Without a residual, the fused kernel and split the op's
 * fused plan takes for these rows (fusedGeometry, fusedKernelFor), launched directly: `batchInvariant: true` would run
 * the tuned kernels on most of these rows (planNormInvariant).
 */
export function viaOp(t: CaseTensors, v: Variant, stream?: Stream): void {
  if (!v.residual) return viaFusedPlan(t, v, stream ?? t.x.device.stream);
  const quant = v.to === "fp8e4m3" ? { quant: { dtype: "fp8e4m3" as const, scaleOut: t.scale } } : {};
  const o = { weight: t.w, residual: t.r, residualOut: t.h, out: yOf(t, v), eps: EPS, ...quant };
  if (v.kind === "rms") rmsNorm(t.x, { ...o, ...(stream ? { stream } : {}) } as never);
  else layerNorm(t.x, { ...o, bias: t.b, ...(stream ? { stream } : {}) } as never);
}

/** A call on the fused kernels in the op's fused plan: its kernel and split for these rows, launched directly. */
export function viaFusedPlan(t: CaseTensors, v: Variant, stream: Stream): void {
  const dev = t.x.device, limits = planLimits(dev), rows = t.x.rows, d = t.x.d, xd = t.x.dtype as X16;
  const g = fusedGeometry(v.kind, d, xd, limits, rows, "cuda");
  if ("unsupported" in g) throw new Error(g.unsupported);
  const c = fusedKernelFor(v.kind, xd, yDtype(v, xd), xd, g, "cuda");
  if ("unsupported" in c) throw new Error(c.unsupported);
  viaKernel(fusedKernel(dev, c.kernel), t, v, rows, d, g, limits.maxGridX, stream);
}

/** The same call launched directly: kernel `k` (of v's dtypes) with geometry `g`, grid capped at `maxGridX`. */
export function viaKernel(
  k: Kernel,
  t: CaseTensors,
  v: Variant,
  rows: number,
  d: number,
  g: FusedGeometry,
  maxGridX: number,
  stream: Stream,
): void {
  const grid = Math.min(Math.ceil(rows / g.rowsPerBlock), maxGridX);
  const y = yOf(t, v), q = v.to === "x" ? 0 : 2;
  const rowsOf = [d, 0] as const; // one level of rows (n0 = rows, n1 = 1), d apart
  k.launch(
    stream,
    new LaunchConfig({ grid: [grid], block: [g.block] }),
    fusedArgs({
      x: t.x.ptr,
      residual: v.residual ? t.r.ptr : 0n,
      h: v.residual ? t.h.ptr : 0n,
      y: y.ptr,
      weight: t.w.ptr,
      bias: v.kind === "layer" ? t.b.ptr : 0n,
      weight2: 0n,
      mean: 0n,
      rstd: 0n,
      scale: q ? t.scale.ptr : 0n,
      n0: rows,
      n1: 1,
      d,
      xStrides: rowsOf,
      rStrides: rowsOf,
      hStrides: rowsOf,
      yStrides: rowsOf,
      eps: EPS,
      scaleValue: 1,
      scaleUpperBound: Infinity,
      quant: q,
      split: 1,
      tpr: g.tpr,
      nv: g.nv,
    }),
  );
}

export type Bits = { h: ArrayLike<number>; y: ArrayLike<number>; scale: ArrayLike<number> };
export const bitsOf = (t: CaseTensors, v: Variant): Bits => ({
  h: t.h.readBitsSync(),
  y: yOf(t, v).readBitsSync(),
  scale: t.scale.readBitsSync(),
});
/** Poisons the outputs (0xff bytes: NaN in bf16, f16 and f32, NaN in fp8e4m3). */
export function poison(t: CaseTensors): void {
  for (const p of [t.h, t.y16, t.y8, t.scale]) p.buffer.fill(0xff);
}
/** h (with a residual), y and (fp8) the scales bit for bit against `want`: "ok", or the first that differs. */
export function agrees(t: CaseTensors, v: Variant, want: Bits): string {
  const got = bitsOf(t, v);
  const keys: (keyof Bits)[] = [
    ...(v.residual ? ["h" as const] : []),
    "y",
    ...(v.to === "fp8e4m3" ? ["scale" as const] : []),
  ];
  for (const k of keys) {
    for (let i = 0; i < want[k].length; i++) if (got[k][i] !== want[k][i]) return `${k}[${i}] differs`;
  }
  return "ok";
}

/** A sign-magnitude element's bits of `width` bits as an ordered integer (+0 and -0 both 0). */
const ordered = (bits: number, width: number): number => {
  const sign = 2 ** (width - 1);
  return bits >= sign ? -(bits - sign) : bits;
};
/**
 * For a build whose arithmetic differs from the op's (ab.ts --near): h (with a residual) bit for bit, y within one step
 * of its dtype (neighbouring encodings; a 16-bit y also within its step at 1, 2^-7 in bf16 and 2^-10 in f16, where
 * LayerNorm's bias cancels most of y),
 * the scales within 1e-5 relative: "ok" and how many y differ, or the first that is further.
 */
export function agreesNear(t: CaseTensors, v: Variant, want: Bits): string {
  const got = bitsOf(t, v);
  for (let i = 0; v.residual && i < want.h.length; i++) if (got.h[i] !== want.h[i]) return `h[${i}] differs`;
  const width = v.to === "x" ? 16 : 8;
  let moved = 0;
  for (let i = 0; i < want.y.length; i++) {
    if (got.y[i] === want.y[i]) continue;
    const steps = Math.abs(ordered(got.y[i], width) - ordered(want.y[i], width));
    const f16 = t.y16.dtype === "f16", value = f16 ? fromF16Bits : fromBf16Bits;
    const near1 = width === 16 && Math.abs(value(got.y[i]) - value(want.y[i])) <= 2 ** (f16 ? -10 : -7);
    if (steps > 1 && !near1) return `y[${i}] more than a step off`;
    moved++;
  }
  if (v.to !== "x") {
    const f = (b: number) => new Float32Array(new Uint32Array([b]).buffer)[0];
    for (let i = 0; i < want.scale.length; i++) {
      const a = f(got.scale[i]), b = f(want.scale[i]);
      if (!(Math.abs(a - b) <= 1e-5 * Math.abs(b))) return `scale[${i}] off by more than 1e-5`;
    }
  }
  return moved ? `ok (${moved} y a step off)` : "ok";
}

/** Bytes a call moves: x (and residual) read, (h and) y written, the scales. */
export const caseBytes = (rows: number, d: number, v: Variant): number =>
  rows * d * ((v.residual ? 3 : 1) * 2 + (v.to === "x" ? 2 : 1)) + (v.to === "x" ? 0 : 4 * rows);

/** The whole numbers ≥ 1 of a comma-separated option (`flag`, named in the error: `--ds`'s row lengths by default), or
 * `fallback`. */
export function wholeNumbers(arg: string | undefined, fallback: readonly number[], flag = "--ds"): number[] {
  if (arg === undefined) return [...fallback];
  const ds = arg.split(",").map(Number);
  if (ds.some((d) => !Number.isInteger(d) || d < 1)) throw new Error(`${flag} takes whole numbers ≥ 1: ${arg}`);
  return ds;
}

/** The fields that name a case and its split in the raw JSON of ab.ts and sweep.ts. */
export const caseKey = (
  mode: "decode" | "prefill",
  v: Variant,
  d: number,
  rows: number,
  g: { tpr: number; nv: number },
) => ({ mode, variant: v.name, d, rows, tpr: g.tpr, nv: g.nv });

/** One call's figure: decode, device µs per op in a CUDA graph; prefill, % of the run's copy ceiling for `bytes`. */
export function measureCase(
  dev: Device,
  timer: { time(fn: () => void): number },
  copyGBs: number,
  mode: "decode" | "prefill",
  bytes: number,
  op: (s: Stream) => void,
): number {
  return mode === "decode" ? graphUs(dev, op) : (100 * (bytes / (timer.time(() => op(dev.stream)) * 1e6))) / copyGBs;
}

/**
 * Diagnostics: the three quiet failures of a norm layer are NaN spreading from the input,
 * overflow (f16 inputs near 65504) and a drifting output distribution. This file gives
 *   - tensorStats(t): non-finite count and abs-max, computed where the tensor lives (two deterministic
 *     kernels on GPUs, kernels/diag.cuh; the host on the CPU backend);
 *   - check mode: the same for input and output of every norm call (Device.open({ check }) or the op's
 *     `check: true`), reported as a CheckReport;
 *   - histogram(t): the output distribution, on the host.
 */
import type { CheckReport, Device, TensorStats } from "../runtime/device.ts";
import { ArgumentError } from "../runtime/errors.ts";
import { type ArgType, LaunchConfig } from "../runtime/module.ts";
import type { DeviceBuffer } from "../runtime/memory.ts";
import type { Stream } from "../runtime/stream.ts";
import type { Tensor } from "../runtime/tensor.ts";
import { checkTensor } from "./validate.ts";
import { normKernel } from "./kernels.ts";
import { checkOptionKeys, optionKeys, STREAM_KEYS } from "../runtime/options.ts";

/** Argument lists of the diagnostics kernels (kernels/norm.cu), for launches and ABI checks. */
export const DIAG_PARTIAL_ARGS: readonly ArgType[] = ["ptr", "i64", "i32", "i64", "ptr", "ptr"]; // x, rows, d, stride, counts, maxes
export const DIAG_FINAL_ARGS: readonly ArgType[] = ["ptr", "ptr", "i32", "ptr", "ptr"]; // counts, maxes, n, out_count, out_max

const HISTOGRAM_KEYS = optionKeys("bins", "range", "stream");
const THREADS = 256; // NK_DIAG_THREADS
const MAX_BLOCKS = 1024; // partials per segment
const SEGMENTS = 2; // input and output, reduced by one final launch
// Scratch layout (bytes): counts u64[SEGMENTS * MAX_BLOCKS] | maxes f32[SEGMENTS * MAX_BLOCKS] | u64[2] | f32[2].
// nk_diag_final's block s reduces counts/maxes[s*n .. s*n+n) for n = blocks: the segments are packed with a
// stride of `blocks` (not MAX_BLOCKS), see partialAt().
const MAXES_AT = SEGMENTS * MAX_BLOCKS * 8;
const RESULT_AT = MAXES_AT + SEGMENTS * MAX_BLOCKS * 4;
const SCRATCH_BYTES = RESULT_AT + SEGMENTS * 8 + SEGMENTS * 4;

/** f16 values above this are one step from overflow (largest f16: 65504). Check mode warns above it. */
export const F16_WARN_ABS = 60_000;

function scratch(device: Device): DeviceBuffer {
  let b = device.cache.get("normkit.diag.scratch") as DeviceBuffer | undefined;
  if (!b || b.closed) {
    b = device.alloc(SCRATCH_BYTES);
    device.cache.set("normkit.diag.scratch", b);
  }
  return b;
}

/** Blocks for n elements: about 16 per thread, at most MAX_BLOCKS (the same n gives the same split). */
function blocksFor(n: number): number {
  return Math.max(1, Math.min(MAX_BLOCKS, Math.ceil(n / (THREADS * 16))));
}

/**
 * @internal Byte offsets in the scratch where the first pass writes segment `seg`'s `blocks` partial counts
 * (u64) and maxes (f32): where nk_diag_final's block `seg` reads them (element seg*blocks onwards).
 */
export function partialAt(seg: number, blocks: number): { counts: number; maxes: number } {
  return { counts: seg * blocks * 8, maxes: MAXES_AT + seg * blocks * 4 };
}

/** @internal The scratch layout constants, for the layout test. */
export const DIAG_SCRATCH = {
  bytes: SCRATCH_BYTES,
  maxesAt: MAXES_AT,
  resultAt: RESULT_AT,
  maxBlocks: MAX_BLOCKS,
  segments: SEGMENTS,
};

/** Queues the first pass over `t` into segment `seg` of the scratch. */
function queuePartial(t: Tensor, stream: Stream, seg: number, blocks: number): void {
  const dev = t.device, buf = scratch(dev);
  const k = normKernel(dev, `nk_diag_partial_${t.dtype}`, DIAG_PARTIAL_ARGS);
  const at = partialAt(seg, blocks);
  k.launch(stream, new LaunchConfig({ grid: [blocks], block: [THREADS] }), [
    t,
    t.rows,
    t.d,
    t.rowStride,
    buf.ptr + BigInt(at.counts),
    buf.ptr + BigInt(at.maxes),
  ]);
}

/** Queues the final pass over `segs` segments of `blocks` partials and reads the results (synchronizes `stream`). */
function finishOnDevice(
  device: Device,
  stream: Stream,
  segs: number,
  blocks: number,
): { nonFinite: number; absMax: number }[] {
  const buf = scratch(device);
  const k = normKernel(device, "nk_diag_final", DIAG_FINAL_ARGS);
  k.launch(stream, new LaunchConfig({ grid: [segs], block: [THREADS] }), [
    buf.ptr,
    buf.ptr + BigInt(MAXES_AT),
    blocks,
    buf.ptr + BigInt(RESULT_AT),
    buf.ptr + BigInt(RESULT_AT + segs * 8),
  ]);
  // The counts of the `segs` segments, then their maxes: only what the kernel wrote is read back.
  const host = new ArrayBuffer(segs * 12);
  buf.read(new Uint8Array(host), { offset: RESULT_AT, stream });
  const counts = new BigUint64Array(host, 0, segs), maxes = new Float32Array(host, segs * 8, segs);
  return Array.from({ length: segs }, (_, s) => ({ nonFinite: Number(counts[s]), absMax: maxes[s] }));
}

/** Host computation (CPU backend; also the reference the GPU tests compare against). */
export function statsOfValues(values: ArrayLike<number>): TensorStats {
  let nonFinite = 0, absMax = 0;
  for (let i = 0; i < values.length; i++) {
    const a = Math.abs(values[i]);
    if (!Number.isFinite(a)) nonFinite++;
    else if (a > absMax) absMax = a;
  }
  return { count: values.length, nonFinite, absMax };
}

/**
 * Non-finite count and abs-max of the finite values of `tensor`, after earlier work on the stream (default: the
 * device's). On GPUs computed by the diagnostics kernels, then 24 bytes are read back (the stream is synchronized).
 * Use it to find where NaN/Inf enter a model, or how close f16 activations are to overflow.
 *
 * @param tensor Any tensor (f32, f16 or bf16, any shape).
 * @param opts.stream The stream to run on (default: the tensor's device's).
 * @throws {ArgumentError} when `tensor` is not a Tensor.
 * @throws {DisposedError} when the tensor or its device is closed.
 * @throws {UnsupportedError} on a GPU before `await loadKernels(dev)` (the diagnostics kernels are among the norm
 *   kernels), or while the stream captures a graph (the stream would be synchronized).
 *
 * @example
 * ```ts
 * import { Device, loadKernels, tensorStats } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev);
 * using y = dev.tensor([1, Infinity, -3, NaN], [2, 2]);
 * const s = tensorStats(y);                    // { count: 4, nonFinite: 2, absMax: 3 }
 * if (s.nonFinite > 0) console.warn(`${s.nonFinite} of ${s.count} values are NaN/Inf`);
 * ```
 */
export function tensorStats(tensor: Tensor, opts: { stream?: Stream } = {}): TensorStats {
  checkOptionKeys(opts, STREAM_KEYS);
  const t = checkTensor("tensor", tensor);
  const stream = opts.stream ?? t.device.stream;
  if (t.device.backend === "cpu") return statsOfValues(t.readSync({ stream }));
  if (t.numel === 0) return { count: 0, nonFinite: 0, absMax: 0 };
  const blocks = blocksFor(t.numel);
  queuePartial(t, stream, 0, blocks);
  return { count: t.numel, ...finishOnDevice(t.device, stream, 1, blocks)[0] };
}

/** Whether a norm call runs in check mode: its `check` option, else the device's mode. */
export function checkModeFor(device: Device, check: unknown): boolean {
  if (check === undefined) return device.check !== null;
  if (typeof check !== "boolean") throw new ArgumentError("check", "a boolean", check);
  return check;
}

/** A check in progress: the input's statistics are taken (or queued) before the op may overwrite x in place. */
export interface PendingCheck {
  finish(y: Tensor): CheckReport;
}

/** Starts check mode for one call; `finish(y)` after the op reports, sets device.lastCheck and calls device.check. */
export function startCheck(op: string, x: Tensor, stream: Stream): PendingCheck {
  const device = x.device;
  const gpu = device.backend !== "cpu";
  const blocks = blocksFor(x.numel);
  let input: TensorStats | undefined;
  if (!gpu) input = statsOfValues(x.readSync({ stream }));
  else if (x.numel > 0) queuePartial(x, stream, 0, blocks);
  return {
    finish(y: Tensor): CheckReport {
      let output: TensorStats;
      if (!gpu) output = statsOfValues(y.readSync({ stream }));
      else if (x.numel === 0) input = output = { count: 0, nonFinite: 0, absMax: 0 };
      else {
        queuePartial(y, stream, 1, blocks);
        const [i, o] = finishOnDevice(device, stream, 2, blocks);
        input = { count: x.numel, ...i };
        output = { count: y.numel, ...o };
      }
      const report: CheckReport = { op, input: input!, output, warnings: warningsFor(x, input!, y, output) };
      device.lastCheck = report;
      device.check?.(report);
      return report;
    },
  };
}

function warningsFor(x: Tensor, input: TensorStats, y: Tensor, output: TensorStats): string[] {
  const w: string[] = [];
  if (input.nonFinite > 0) w.push(`input: ${input.nonFinite} non-finite value(s) (NaN/Inf): their rows come out NaN`);
  if (output.nonFinite > input.nonFinite) {
    w.push(`output: ${output.nonFinite} non-finite value(s), more than the input's ${input.nonFinite}`);
  } else if (output.nonFinite > 0) w.push(`output: ${output.nonFinite} non-finite value(s)`);
  for (const [name, t, s] of [["input", x, input], ["output", y, output]] as const) {
    if (t.dtype === "f16" && s.absMax > F16_WARN_ABS) {
      w.push(`${name}: abs-max ${s.absMax} is near the f16 maximum 65504 (overflow to Inf is one step away)`);
    }
  }
  return w;
}

/** A histogram of a tensor's values. */
export interface Histogram {
  /** bins + 1 increasing edges; bin i holds values in [edges[i], edges[i+1]) (the last bin includes its top). */
  edges: number[];
  /** How many values fell in each bin. */
  counts: number[];
  /** Finite values below edges[0]. */
  below: number;
  /** Finite values above the last edge. */
  above: number;
  /** NaN and ±Inf values (in no bin). */
  nonFinite: number;
  /** Elements looked at. */
  count: number;
}

/**
 * Histogram of `tensor`'s values (read to the host) over `range` (default [-4, 4]: LLM activations after a norm
 * mostly sit in [-3, 3]; mass outside says the scale is off) in `bins` equal bins (default 16).
 *
 * @param tensor Any tensor; its values are read back after earlier work on `opts.stream` (synchronizes it).
 * @param opts.bins Number of equal bins, 1 to 1e6 (default 16).
 * @param opts.range [lo, hi], finite, lo < hi (default [-4, 4]).
 * @param opts.stream The stream to read on (default: the tensor's device's).
 * @throws {ArgumentError} for a bad `bins` or `range`, or when `tensor` is not a Tensor.
 * @throws {DisposedError} when the tensor or its device is closed.
 *
 * @example
 * ```ts
 * import { Device, histogram, layerNorm, loadKernels } from "@normkit/normkit";
 * using dev = Device.open();
 * await loadKernels(dev);
 * using x = dev.tensor(new Float32Array(32 * 256).map(() => Math.random() * 10), [32, 256]);
 * using y = layerNorm(x);
 * const h = histogram(y, { bins: 8, range: [-4, 4] });
 * console.log(h.edges, h.counts, `outside: ${h.below + h.above}`);
 * ```
 */
export function histogram(
  tensor: Tensor,
  opts: { bins?: number; range?: readonly [number, number]; stream?: Stream } = {},
): Histogram {
  checkOptionKeys(opts, HISTOGRAM_KEYS);
  const t = checkTensor("tensor", tensor);
  const bins = opts.bins ?? 16;
  if (!Number.isInteger(bins) || bins < 1 || bins > 1_000_000) {
    throw new ArgumentError("bins", "an integer 1 to 1e6", bins);
  }
  const [lo, hi] = opts.range ?? [-4, 4];
  if (!(Number.isFinite(lo) && Number.isFinite(hi) && lo < hi)) {
    throw new ArgumentError("range", "[lo, hi], finite, lo < hi", opts.range);
  }
  const values = t.readSync({ stream: opts.stream });
  const counts = new Array<number>(bins).fill(0);
  let below = 0, above = 0, nonFinite = 0;
  const width = (hi - lo) / bins;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Number.isFinite(v)) nonFinite++;
    else if (v < lo) below++;
    else if (v > hi) above++;
    else counts[Math.min(bins - 1, Math.floor((v - lo) / width))]++;
  }
  const edges = Array.from({ length: bins + 1 }, (_, i) => (i === bins ? hi : lo + i * width));
  return { edges, counts, below, above, nonFinite, count: values.length };
}

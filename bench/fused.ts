/**
 * The fused norms' benchmark (a benchmark, not a test), timed as bench/bench.ts (device events, median after warm-up,
 * a 256 MiB memset before each call; % of a device-to-device copy measured in the same run), with
 * bench/compare_torch_fused.py running the same cases in torch eager and torch.compile:
 *
 * - `add`: h = x + residual, y = norm(h): add + RMSNorm / LayerNorm, bf16 and f16, D 512 … 8192, rows moving ≥ 1 GiB;
 *   bytes = x and residual read, h and y written (+ parameters). With `quant` fp8e4m3 / int8 (dynamic, per row): y of
 *   1 byte and a 4-byte scale per row.
 * - `invariance`: the plain norm (no residual, y in x's dtype) with the tuned plan (which varies with the row count) and
 *   with `batchInvariant: true` (a row-count-free geometry: planNormInvariant, or the fused kernels'), same tensors, rows
 *   moving ≥ 1 GiB: the cost of invariance in points of copy (bytes = x read, y written + parameters); then both on 1 and
 *   8 rows of D 2048–8192 (bf16) in a CUDA graph, µs per op.
 * - `decode`: 1–8 rows, D 2048–8192, add + RMSNorm + fp8e4m3 (dynamic) captured 100 times in a CUDA graph: device µs per
 *   op of a replay.
 * - `qk`: Qwen3's q_norm / k_norm over a fused QKV buffer [tokens, (Hq + 2·Hkv) · 128] (Hq 32, Hkv 8), the Q and K
 *   heads as one view [tokens, Hq + Hkv, 128] normalized in place in one call (weights split at head Hq); decode
 *   (1 and 8 tokens: graph µs per op) and prefill (16384 tokens: GB/s, bytes = the heads read and written).
 *
 *   deno run -A bench/fused.ts [--quick] [--only add,invariance,decode,qk] [--json out.json]   bun bench/fused.ts [...]
 */
import process from "node:process";
import { writeFileSync } from "node:fs";
import {
  type DType,
  layerNorm,
  type LayerNormOptions,
  loadKernels,
  type QuantDType,
  rmsNorm,
  type RMSNormOptions,
  type Tensor,
} from "../mod.ts";
import type { Stream } from "../gpu.ts";
import { fillFromTile, randomTile } from "./tile.ts";
import { copyCeilingGBs, deviceTimer, graphUs } from "./device_timer.ts";
import { openCuda } from "./open_cuda.ts";

type QuantDtype = QuantDType;
/** The fused norms, typed to return y (the benchmark reads the scales of dynamic calls from `quant.scaleOut`). */
type FusedNorm = (x: Tensor, opts: RMSNormOptions & LayerNormOptions) => Tensor;
const fusedRms = rmsNorm as FusedNorm;
const fusedLn = layerNorm as FusedNorm;
const view = (t: Tensor, shape: number[], strides: number[], offset = 0): Tensor => t.view(shape, { strides, offset });

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const jsonPath = args.includes("--json") ? args[args.indexOf("--json") + 1] : undefined;
const PARTS = ["add", "invariance", "decode", "qk"];
const only = args.includes("--only") ? args[args.indexOf("--only") + 1]?.split(",") : PARTS;
if (!only?.length || only.some((p) => !PARTS.includes(p))) {
  console.error(`bench/fused.ts: --only takes a comma-separated list of ${PARTS.join(", ")}; got ${only}`);
  process.exit(2);
}
const part = (name: string) => only.includes(name);
const runtime = "Deno" in globalThis ? "deno" : "bun";
const DS = quick ? [1024, 4096] : [512, 1024, 2048, 4096, 5120, 8192];
const DTYPES: DType[] = ["bf16", "f16"];
const QUANTS: (QuantDtype | null)[] = [null, "fp8e4m3", "int8"];
const DECODE_ROWS = [1, 2, 4, 8], DECODE_DS = [2048, 4096, 8192];
const HQ = 32, HKV = 8, HEAD = 128, QK_DECODE = [1, 8], QK_PREFILL = 16384;
const MIN_BYTES = 2 ** 30, REPS = quick ? 10 : 30, GRAPH_OPS = 100, REPLAYS = 200;

using dev = openCuda("bench/fused.ts");
await loadKernels(dev, { quant: true });
using timer = deviceTimer(dev, REPS);
const copyGBs = copyCeilingGBs(dev, timer);
console.log(`# ${dev.info.name} (${dev.info.arch}, ${dev.info.multiprocessors} SMs), ${runtime}`);
console.log(`# device-to-device copy: ${copyGBs.toFixed(0)} GB/s (read + write, 1 GiB)`);
const tile = randomTile(1);
const results: Record<string, unknown>[] = [];

/** A tensor of `dtype` (quantized dtypes included) from the tile, or empty. */
const make = (held: DisposableStack, shape: number[], dtype: string, fill = true): Tensor => {
  const t = held.use(dev.empty(shape, { dtype: dtype as DType }));
  if (fill) fillFromTile(t, tile);
  return t;
};
const params = (held: DisposableStack, d: number, dtype: DType) => ({
  w: held.use(dev.tensor(tile.subarray(0, d).map((v) => 1 + v / 8), [d], { dtype })),
  b: held.use(dev.tensor(tile.subarray(d, 2 * d), [d], { dtype })),
});

// ---------------------------------------------------------------- add + norm (+ dynamic quantization)
if (part("add")) {
  console.log("case  kind  dtype  quant         D     rows       µs     GB/s  %copy");
  for (const d of DS) {
    for (const dtype of DTYPES) {
      for (const quant of QUANTS) {
        const b = 2, yb = quant ? 1 : b;
        const perRow = d * (3 * b + yb) + (quant ? 4 : 0);
        const rows = Math.ceil(MIN_BYTES / perRow);
        using held = new DisposableStack();
        try {
          const x = make(held, [rows, d], dtype), residual = make(held, [rows, d], dtype);
          const h = make(held, [rows, d], dtype, false), y = make(held, [rows, d], quant ?? dtype, false);
          const scaleOut = quant ? make(held, [rows], "f32", false) : undefined;
          const { w, b: bias } = params(held, d, dtype);
          for (const kind of ["rms", "layer"] as const) {
            const opts: RMSNormOptions & LayerNormOptions = {
              weight: w,
              residual,
              residualOut: h,
              out: y,
              ...(kind === "layer" ? { bias } : {}),
              ...(quant ? { quant: { dtype: quant, scaleOut } } : {}),
            };
            const norm = kind === "rms" ? fusedRms : fusedLn;
            const ms = timer.time(() => void norm(x, opts));
            const bytes = rows * perRow + d * b * (kind === "layer" ? 2 : 1);
            const gbs = bytes / (ms * 1e6);
            results.push({
              case: "add",
              kind,
              dtype,
              quant,
              d,
              rows,
              us: ms * 1e3,
              gbs,
              pctCopy: (100 * gbs) / copyGBs,
            });
            console.log(
              `add   ${kind.padEnd(5)} ${dtype.padEnd(5)}  ${(quant ?? "-").padEnd(8)} ${String(d).padStart(6)} ` +
                `${String(rows).padStart(8)} ${(ms * 1e3).toFixed(1).padStart(8)} ${gbs.toFixed(0).padStart(8)} ` +
                `${((100 * gbs) / copyGBs).toFixed(1).padStart(6)}`,
            );
          }
        } catch (e) {
          console.log(`add ${dtype} ${quant ?? "-"} D=${d}: ${e instanceof Error ? e.message : e}`);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- invariance: tuned plan against batchInvariant
if (part("invariance")) {
  console.log("case  kind  dtype       D     rows  tuned%  invariant%  cost(points)");
  for (const d of DS) {
    for (const dtype of DTYPES) {
      const rows = Math.ceil(MIN_BYTES / (4 * d));
      using held = new DisposableStack();
      try {
        const x = make(held, [rows, d], dtype), y = make(held, [rows, d], dtype, false);
        const { w, b: bias } = params(held, d, dtype);
        for (const kind of ["rms", "layer"] as const) {
          const norm = kind === "rms" ? fusedRms : fusedLn;
          const opts = { weight: w, out: y, ...(kind === "layer" ? { bias } : {}) };
          const bytes = rows * d * 4 + d * 2 * (kind === "layer" ? 2 : 1);
          const pct = (ms: number) => (100 * bytes) / (ms * 1e6) / copyGBs;
          const tuned = pct(timer.time(() => void norm(x, opts)));
          const invariant = pct(timer.time(() => void norm(x, { ...opts, batchInvariant: true })));
          results.push({ case: "invariance", kind, dtype, d, rows, tunedPct: tuned, invariantPct: invariant });
          console.log(
            `inv   ${kind.padEnd(5)} ${dtype.padEnd(5)} ${String(d).padStart(6)} ${String(rows).padStart(8)} ` +
              `${tuned.toFixed(1).padStart(7)} ${invariant.toFixed(1).padStart(11)} ${
                (tuned - invariant).toFixed(1).padStart(13)
              }`,
          );
        }
      } catch (e) {
        console.log(`invariance ${dtype} D=${d}: ${e instanceof Error ? e.message : e}`);
      }
    }
  }
  // Decode: the same two calls on 1 and 8 rows in a CUDA graph (the tuned plan's latency mapping against the invariant
  // geometry), device µs per op.
  for (const d of DECODE_DS) {
    for (const rows of [1, 8]) {
      using held = new DisposableStack();
      try {
        const x = make(held, [rows, d], "bf16"), y = make(held, [rows, d], "bf16", false);
        const { w, b: bias } = params(held, d, "bf16");
        for (const kind of ["rms", "layer"] as const) {
          const norm = kind === "rms" ? fusedRms : fusedLn;
          const opts = { weight: w, out: y, ...(kind === "layer" ? { bias } : {}) };
          const us = (invariant: boolean) =>
            graphUs(dev, (stream) => void norm(x, { ...opts, stream, batchInvariant: invariant }), GRAPH_OPS, REPLAYS);
          const tunedUs = us(false), invariantUs = us(true);
          results.push({ case: "invariance-decode", kind, dtype: "bf16", d, rows, tunedUs, invariantUs });
          console.log(
            `inv decode ${kind} bf16 D=${d} rows=${rows}: tuned ${tunedUs.toFixed(2)} µs/op, invariant ` +
              `${invariantUs.toFixed(2)} (graph)`,
          );
        }
      } catch (e) {
        console.log(`invariance decode D=${d} rows=${rows}: ${e instanceof Error ? e.message : e}`);
      }
    }
  }
}

// ---------------------------------------------------------------- decode: add + RMSNorm + fp8, graphs
if (part("decode")) {
  for (const d of DECODE_DS) {
    for (const rows of DECODE_ROWS) {
      using held = new DisposableStack();
      try {
        const x = make(held, [rows, d], "bf16"), residual = make(held, [rows, d], "bf16");
        const y = make(held, [rows, d], "fp8e4m3", false), scaleOut = make(held, [rows], "f32", false);
        const { w } = params(held, d, "bf16");
        // The residual in place, as a decoder layer keeps it.
        const us = graphUs(
          dev,
          (stream) => void fusedRms(x, { weight: w, residual, out: y, quant: { dtype: "fp8e4m3", scaleOut }, stream }),
          GRAPH_OPS,
          REPLAYS,
        );
        results.push({ case: "decode", kind: "rms", dtype: "bf16", quant: "fp8e4m3", d, rows, graphUs: us });
        console.log(`decode rms bf16 fp8e4m3 D=${d} rows=${rows}: ${us.toFixed(2)} µs/op (graph)`);
      } catch (e) {
        console.log(`decode D=${d} rows=${rows}: ${e instanceof Error ? e.message : e}`);
      }
    }
  }
}

// ---------------------------------------------------------------- QK-norm over a fused QKV buffer
const width = (HQ + 2 * HKV) * HEAD;
const qkCall = (qkv: Tensor, tokens: number, qw: Tensor, kw: Tensor, stream?: Stream) => {
  const qk = view(qkv, [tokens, HQ + HKV, HEAD], [width, HEAD, 1]);
  fusedRms(qk, { weight: qw, weight2: kw, split: HQ, out: qk, ...(stream ? { stream } : {}) });
};
for (const tokens of part("qk") ? [...QK_DECODE, QK_PREFILL] : []) {
  using held = new DisposableStack();
  try {
    const qkv = make(held, [tokens, width], "bf16");
    const qw = params(held, HEAD, "bf16").w;
    const kw = held.use(dev.tensor(tile.subarray(2 * HEAD, 3 * HEAD).map((v) => 1 + v / 8), [HEAD], { dtype: "bf16" }));
    const row: Record<string, unknown> = { case: "qk", dtype: "bf16", tokens, hq: HQ, hkv: HKV, headDim: HEAD };
    if (tokens === QK_PREFILL) {
      const ms = timer.time(() => qkCall(qkv, tokens, qw, kw));
      const bytes = 2 * tokens * (HQ + HKV) * HEAD * 2 + 2 * HEAD * 2, gbs = bytes / (ms * 1e6);
      Object.assign(row, { us: ms * 1e3, gbs, pctCopy: (100 * gbs) / copyGBs });
      console.log(`qk prefill tokens=${tokens}: ${(ms * 1e3).toFixed(1)} µs, ${gbs.toFixed(0)} GB/s`);
    } else {
      row.graphUs = graphUs(dev, (stream) => qkCall(qkv, tokens, qw, kw, stream), GRAPH_OPS, REPLAYS);
      console.log(`qk decode tokens=${tokens}: ${(row.graphUs as number).toFixed(2)} µs/op (graph)`);
    }
    results.push(row);
  } catch (e) {
    console.log(`qk tokens=${tokens}: ${e instanceof Error ? e.message : e}`);
  }
}

if (jsonPath) {
  const info = { device: dev.info.name, arch: dev.info.arch, runtime, date: new Date().toISOString(), copyGBs };
  writeFileSync(jsonPath, JSON.stringify({ ...info, results }, null, 1));
}

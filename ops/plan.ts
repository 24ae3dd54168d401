/**
 * The launch plan: one pure function from the problem (norm kind, D, rows, dtypes) and the device's limits
 * to a kernel name and launch geometry. No I/O, no driver: unit-tested in CI.
 *
 * Today there is one mapping (the simple f32 kernels: one 256-thread block per row, rows grid-strided when
 * there are more rows than grid slots). The fast kernels' table replaces this in its own change.
 */
import type { DType } from "../runtime/dtype.ts";

export type NormKind = "layer" | "rms";

export interface PlanInput {
  kind: NormKind;
  rows: number;
  d: number;
  inputDtype: DType;
  outputDtype: DType;
  /** dtype of weight/bias when present */
  paramDtype?: DType;
}

/** The device limits a plan depends on. */
export interface PlanLimits {
  maxGridX: number;
  maxThreadsPerBlock: number;
  warpSize: number;
}

export interface LaunchPlan {
  kernel: string;
  grid: [number, number, number];
  block: [number, number, number];
  sharedBytes: number;
}

/** Why no plan exists, as a sentence naming the unsupported part. */
export type PlanResult = { plan: LaunchPlan } | { unsupported: string };

const BLOCK = 256;

export function planNorm(p: PlanInput, limits: PlanLimits): PlanResult {
  if (p.inputDtype !== "f32" || p.outputDtype !== "f32" || (p.paramDtype && p.paramDtype !== "f32")) {
    return { unsupported: `GPU kernels for ${p.inputDtype} input / ${p.outputDtype} output / ${p.paramDtype ?? "no"} params are not built yet (only f32 for now)` };
  }
  if (p.rows < 1 || p.d < 1) return { unsupported: "rows and d must be ≥ 1 to launch" };
  const block = Math.min(BLOCK, limits.maxThreadsPerBlock);
  // The kernels reduce through one float per warp, double-buffered: (block / warp) * 2 * 4 bytes.
  const sharedBytes = Math.ceil(block / limits.warpSize) * 8;
  return {
    plan: {
      kernel: p.kind === "layer" ? "ln_fwd_f32_simple" : "rms_fwd_f32_simple",
      grid: [Math.min(p.rows, limits.maxGridX), 1, 1],
      block: [block, 1, 1],
      sharedBytes,
    },
  };
}

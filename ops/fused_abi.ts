/**
 * The fused kernels' launch interface (kernels/fused.cuh, NK_FUSED_PARAMS): parameter names and types in order,
 * and the constants the kernels check. Pure: the op and the lab's direct launches pack their arguments with fusedArgs.
 */
import type { ArgType } from "../runtime/module.ts";

/** One kernel parameter: its name in kernels/fused.cuh and its type as packed at launch. */
export interface FusedParam {
  readonly name: string;
  readonly type: ArgType;
}

/** The parameters of every nk_fused_* kernel, in order (NK_FUSED_PARAMS). */
export const FUSED_PARAMS: readonly FusedParam[] = Object.freeze([
  { name: "x", type: "ptr" },
  { name: "residual", type: "ptr" }, // or 0
  { name: "h", type: "ptr" }, // x + residual out, or 0 (may equal residual)
  { name: "y", type: "ptr" },
  { name: "weight", type: "ptr" }, // or 0
  { name: "bias", type: "ptr" }, // or 0 (LayerNorm only)
  { name: "weight2", type: "ptr" }, // weight of the rows i1 >= split, or 0
  { name: "mean", type: "ptr" }, // f32 [rows] or 0 (LayerNorm only)
  { name: "rstd", type: "ptr" }, // f32 [rows] or 0
  { name: "scale", type: "ptr" }, // static: f32 [1] or 0 (then scale_value); dynamic: f32 [rows] out
  { name: "n0", type: "i32" },
  { name: "n1", type: "i32" },
  { name: "d", type: "i32" },
  { name: "x_s0", type: "i64" },
  { name: "x_s1", type: "i64" },
  { name: "r_s0", type: "i64" },
  { name: "r_s1", type: "i64" },
  { name: "h_s0", type: "i64" },
  { name: "h_s1", type: "i64" },
  { name: "y_s0", type: "i64" },
  { name: "y_s1", type: "i64" },
  { name: "eps", type: "f32" },
  { name: "scale_value", type: "f32" },
  { name: "scale_ub", type: "f32" },
  { name: "quant", type: "i32" }, // FUSED_QUANT
  { name: "split", type: "i32" },
  { name: "tpr", type: "i32" },
  { name: "nv", type: "i32" },
].map((p) => Object.freeze(p as FusedParam)));

/** The argument types of every nk_fused_* kernel, in order (for Module.kernel). */
export const FUSED_ARGS: readonly ArgType[] = Object.freeze(FUSED_PARAMS.map((p) => p.type));

/** A launch's arguments by name (strides in elements, per level: [s0, s1]); fusedArgs puts them in FUSED_PARAMS' order. */
export interface FusedArgValues {
  x: bigint;
  residual: bigint;
  h: bigint;
  y: bigint;
  weight: bigint;
  bias: bigint;
  weight2: bigint;
  mean: bigint;
  rstd: bigint;
  scale: bigint;
  n0: number;
  n1: number;
  d: number;
  xStrides: readonly [number, number];
  rStrides: readonly [number, number];
  hStrides: readonly [number, number];
  yStrides: readonly [number, number];
  eps: number;
  scaleValue: number;
  scaleUpperBound: number;
  quant: number;
  split: number;
  tpr: number;
  nv: number;
}

/** The kernel arguments of `a`, in FUSED_PARAMS' order (what the op and the lab's direct launches pass). */
export function fusedArgs(a: FusedArgValues): (bigint | number)[] {
  return [
    a.x,
    a.residual,
    a.h,
    a.y,
    a.weight,
    a.bias,
    a.weight2,
    a.mean,
    a.rstd,
    a.scale,
    a.n0,
    a.n1,
    a.d,
    ...a.xStrides,
    ...a.rStrides,
    ...a.hStrides,
    ...a.yStrides,
    a.eps,
    a.scaleValue,
    a.scaleUpperBound,
    a.quant,
    a.split,
    a.tpr,
    a.nv,
  ];
}

/** Parameter `quant` (NK_QUANT_* in kernels/fused.cuh). */
export const FUSED_QUANT = Object.freeze({ none: 0, static: 1, dynamic: 2 } as const);

/** Parameters of nk_fused_add_{f32|f16|bf16}: dst, src, rows, d, dst_stride, src_stride (dst = dst + src). */
export const FUSED_ADD_ARGS: readonly ArgType[] = Object.freeze(["ptr", "ptr", "i32", "i32", "i64", "i64"]);
/** Threads per block of nk_fused_add_*: a block per row, grid-striding over rows. */
export const FUSED_ADD_THREADS = 256;

/**
 * The fused kernels' launch interface (kernels/fused.cuh, NK_FUSED_PARAMS): parameter names and types in order,
 * the kernel names, and the constants the kernels check. Pure data: the op packs its arguments from here.
 */
import { UnsupportedError } from "../runtime/errors.ts";
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

/** Parameter `quant` (NK_QUANT_* in kernels/fused.cuh). */
export const FUSED_QUANT = Object.freeze({ none: 0, static: 1, dynamic: 2 } as const);

/** Largest `nv`, 16-byte chunks of x per thread (NK_FUSED_MAXV). */
export const FUSED_MAXV = 8;

/** Input dtypes of the fused kernels. */
export type FusedInput = "f32" | "f16" | "bf16";
/** Quantized output dtypes (1 byte each) and their largest magnitude (qmax of the dynamic scale). */
export const FUSED_QMAX = Object.freeze({ fp8e4m3: 448, fp8e5m2: 57344, int8: 127 } as const);
export type FusedQuantDtype = keyof typeof FUSED_QMAX;

/**
 * The kernel for a call: y of the input's dtype or a quantized one, weights f32 or the input's dtype.
 * @throws UnsupportedError for a combination that is not built (the op validates the call before naming a kernel).
 */
export function fusedKernelName(
  kind: "ln" | "rms",
  input: FusedInput,
  output: FusedInput | FusedQuantDtype,
  weight: FusedInput,
): string {
  if (output !== input && !(output in FUSED_QMAX)) {
    throw new UnsupportedError(`fused kernels: y of ${input} x is ${input} or quantized, not ${output}`);
  }
  if (weight !== "f32" && weight !== input) {
    throw new UnsupportedError(`fused kernels: weights of ${input} x are f32 or ${input}, not ${weight}`);
  }
  return `nk_fused_${kind}_${input}_${output}_${weight}`;
}

/** Every fused kernel name, in kernels/fused.cu's order. */
export function fusedKernelNames(): string[] {
  const names: string[] = [];
  for (const kind of ["ln", "rms"] as const) {
    for (const ti of ["f32", "f16", "bf16"] as const) {
      for (const to of [ti, "fp8e4m3", "fp8e5m2", "int8"] as const) {
        for (const tw of ti === "f32" ? ["f32"] as const : ["f32", ti] as const) {
          names.push(fusedKernelName(kind, ti, to, tw));
        }
      }
    }
  }
  return names;
}

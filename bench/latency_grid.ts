/** Issue 5's small-batch grid, shared by bench/latency.ts and bench/latency_inproc.ts: bf16, rows × D, both norms. */
import { layerNorm, rmsNorm, type Tensor } from "../mod.ts";
import type { Stream } from "../gpu.ts";

export const ROWS = [1, 8, 64], DS = [2048, 4096, 8192], KINDS = ["rms", "layer"] as const;

/** The call under test: rmsNorm(x, {weight, out}) or layerNorm(x, {weight, bias, out}) on stream `s` (the hot path). */
export function normOp(kind: (typeof KINDS)[number], x: Tensor, w: Tensor, b: Tensor, y: Tensor): (s: Stream) => Tensor {
  return kind === "rms"
    ? (s) => rmsNorm(x, { weight: w, out: y, stream: s })
    : (s) => layerNorm(x, { weight: w, bias: b, out: y, stream: s });
}

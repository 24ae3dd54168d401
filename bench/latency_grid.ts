/** The small-batch grid, shared by bench/latency.ts and bench/latency_inproc.ts: bf16, rows × D, both norms. */
import { type Device, layerNorm, rmsNorm, type Tensor } from "../mod.ts";
import type { Stream } from "../gpu.ts";
import { randoms } from "../tests/fixtures/random.ts";

export const ROWS = [1, 8, 64], DS = [2048, 4096, 8192], KINDS = ["rms", "layer"] as const;

/** The call under test: rmsNorm(x, {weight, out}) or layerNorm(x, {weight, bias, out}) on stream `s` (the hot path). */
export function normOp(
  kind: (typeof KINDS)[number],
  x: Tensor,
  w: Tensor,
  b: Tensor,
  y: Tensor,
): (s: Stream) => Tensor {
  return kind === "rms"
    ? (s) => rmsNorm(x, { weight: w, out: y, stream: s })
    : (s) => layerNorm(x, { weight: w, bias: b, out: y, stream: s });
}

/** One case of the grid: its bf16 tensors and the call under test. */
export interface GridCase {
  kind: (typeof KINDS)[number];
  d: number;
  rows: number;
  x: Tensor;
  w: Tensor;
  b: Tensor;
  y: Tensor;
  op: (s: Stream) => Tensor;
}

/**
 * Every case of the grid on `dev`, norms outermost: x random in [-2, 2), w in [0.5, 1.5), b in [-1, 1) (the same
 * seeds in every process), y empty. A case's tensors are freed when the loop moves past it (w and b after their D).
 */
export function* gridCases(dev: Device): Generator<GridCase> {
  for (const kind of KINDS) {
    for (const d of DS) {
      using w = dev.tensor(randoms(d, 1, 0.5, 1.5), [d], { dtype: "bf16" });
      using b = dev.tensor(randoms(d, 2), [d], { dtype: "bf16" });
      for (const rows of ROWS) {
        using x = dev.tensor(randoms(rows * d, 3, -2, 2), [rows, d], { dtype: "bf16" });
        using y = dev.empty([rows, d], { dtype: "bf16" });
        yield { kind, d, rows, x, w, b, y, op: normOp(kind, x, w, b, y) };
      }
    }
  }
}

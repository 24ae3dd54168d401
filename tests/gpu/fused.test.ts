/**
 * The fused kernels on CUDA: the grid against the float64 reference (tolerances in
 * tests/fixtures/fused_cases.ts), batch invariance bitwise (rows computed alone and inside batches whose sizes sit on the
 * tuned plan's boundaries), QK-norm over views against the norm over copies, and the residual backward.
 * Skipped, with the reason, when there is no CUDA device.
 */
import assert from "node:assert/strict";
import { Device, layerNorm, loadKernels, rmsNorm, rmsNormBackward, type Tensor } from "../../mod.ts";
import { describeCase, FUSED_ROWS, fusedGrid, runFusedCase } from "../fixtures/fused_cases.ts";
import { gpuTest, randoms } from "../fixtures/helpers.ts";
import { checkHeadMajorViews, checkQkViews } from "../fixtures/qk_views.ts";

async function open(): Promise<Device> {
  const dev = Device.open({ backend: "cuda", sanityCheck: false });
  await loadKernels(dev, { quant: true, backward: true });
  return dev;
}

gpuTest(
  "fused kernels against float64: every D, dtype, residual on/off, quant none/static/dynamic at 7 and 83 rows; 4096 rows sampled",
  async () => {
    using dev = await open();
    // 4096 rows: every kind and dtype at three D (short, long, odd), with and without quantization (the float64
    // reference of the full grid at 4096 rows would take hours in JavaScript).
    const big = fusedGrid([FUSED_ROWS[2]], [770, 8192, 8199]).filter((c) =>
      c.residual && (c.quant === "none" || (c.quant === "dynamic" && c.qdtype === "fp8e4m3") ||
        (c.quant === "static" && c.qdtype === "int8"))
    );
    const cases = [...fusedGrid(FUSED_ROWS.slice(0, 2)), ...big];
    let worst = 0;
    for (const c of cases) {
      try {
        worst = Math.max(worst, runFusedCase(dev, c));
      } catch (e) {
        throw new Error(`${describeCase(c)}: ${(e as Error).message}`);
      }
    }
    console.log(`# ${cases.length} cases, largest error ${worst.toFixed(3)} × tolerance`);
  },
);

gpuTest("fused zero, NaN and Inf rows: floor scale and q = 0; NaN rows give NaN (fp8) / 0 (int8)", async () => {
  using dev = await open();
  for (const qdtype of ["fp8e4m3", "fp8e5m2", "int8"] as const) {
    for (const kind of ["rms", "layer"] as const) {
      for (const d of [8, 770, 8192]) {
        runFusedCase(dev, { kind, dtype: "bf16", d, rows: 9, residual: true, quant: "dynamic", qdtype, special: true });
      }
    }
  }
});

gpuTest(
  "h to a residualOut apart from the residual, on every kernel family: the separate add, the residual unchanged",
  async () => {
    using dev = await open();
    // [D, rows]: a chunk a lane (128 at 300 rows), 4 chunks a lane (128 at 4096), decode on _nv2 (2048 at 9) and _nv4
    // (8192 at 9), prefill on _nv4 (4096 at 4096 rows), RMSNorm's padded rows on the 8-chunk kernel (5120 at 4096),
    // the 8-chunk kernel past 1024 chunks (16384 at 300), the scalar path (770).
    const shapes = [[128, 300], [128, 4096], [2048, 9], [8192, 9], [4096, 4096], [5120, 4096], [16384, 300], [770, 83]];
    for (const kind of ["rms", "layer"] as const) {
      for (const dtype of ["bf16", "f16"] as const) {
        for (const [d, rows] of shapes) {
          runFusedCase(dev, { kind, dtype, d, rows, residual: true, quant: "none", hApart: true });
        }
        runFusedCase(dev, {
          kind,
          dtype,
          d: 16384,
          rows: 9,
          residual: true,
          quant: "dynamic",
          qdtype: "fp8e4m3",
          hApart: true,
        });
      }
    }
  },
);

gpuTest(
  "LayerNorm rows whose shift lies far from the mean (the centred pass) beside ordinary rows, against float64",
  async () => {
    using dev = await open();
    // Sub-warp rows sharing a warp (D 128: a chunk a lane at 300 rows, 4 at 4096), the scalar path (770), a block per row
    // on _nv4 (4096, 5120) and on the 8-chunk kernel (16384).
    for (const dtype of ["bf16", "f16", "f32"] as const) {
      for (const d of [128, 770, 4096, 5120, 16384]) {
        for (const rows of d <= 770 ? [9, 300, 4096] : [9, 300]) {
          const residual = d === 770;
          runFusedCase(dev, { kind: "layer", dtype, d, rows, residual, quant: "none", outlier: true });
          runFusedCase(dev, {
            kind: "layer",
            dtype,
            d,
            rows,
            residual,
            quant: "dynamic",
            qdtype: "int8",
            outlier: true,
          });
        }
      }
    }
  },
);

/** Bits of a tensor, for bitwise comparison. */
const bits = (t: Tensor): number[] => Array.from(t.readBitsSync() as ArrayLike<number>);

gpuTest(
  "batch invariance: a row's h, y, q and scale are bitwise the same alone and in batches of 2 … 50000 rows",
  async () => {
    using dev = await open();
    for (const kind of ["rms", "layer"] as const) {
      // The fused kernels only at 128 (the tile); LayerNorm's invariant tuned plan: two-pass `rows` (512, vector path;
      // 770, masked), one-pass `rows` of a warp a row (2048), `block` (4096, vector; 8199, masked).
      const shapes = [
        [128, "bf16"],
        [512, "bf16"],
        [770, "f16"],
        [2048, "f16"],
        [4096, "bf16"],
        [8199, "f32"],
      ] as const;
      for (const [d, dtype] of shapes) {
        // The tuned plan's boundaries on an H200 (132 SMs: 131/132, 264/265), then a prefill-sized batch.
        const batches = [1, 2, 7, 131, 132, 133, 264, 265, 4096, d <= 1024 ? 50_000 : 8192];
        const maxRows = batches[batches.length - 1];
        const xv = randoms(maxRows * d, d + 1), rv = randoms(maxRows * d, d + 2);
        // Odd rows' first element far from their mean: LayerNorm's centred pass on them, one pass on the even rows.
        for (let r = 1; r < maxRows; r += 2) xv[r * d] = 64;
        using w = dev.tensor(randoms(d, d + 3, 0.5, 1.5), [d], { dtype });
        const probe = [0, 1, 130, 263, 4095, maxRows - 1];
        const seen = new Map<number, string>();
        for (const rows of batches) {
          // The probed rows that fall in this batch, computed in place at their position in it.
          using x = dev.tensor(xv.subarray(0, rows * d), [rows, d], { dtype });
          using res = dev.tensor(rv.subarray(0, rows * d), [rows, d], { dtype });
          using r = (kind === "layer" ? layerNorm : rmsNorm)(x, {
            weight: w,
            residual: res,
            quant: { dtype: "fp8e4m3" },
          });
          using y2 = (kind === "layer" ? layerNorm : rmsNorm)(x, { weight: w, batchInvariant: true });
          const q = bits(r.y), h = bits(res), s = bits(r.scale), y = bits(y2);
          for (const p of probe.filter((p) => p < rows)) {
            const key = JSON.stringify([
              q.slice(p * d, (p + 1) * d),
              h.slice(p * d, (p + 1) * d),
              s[p],
              y.slice(p * d, (p + 1) * d),
            ]);
            const before = seen.get(p);
            if (before === undefined) seen.set(p, key);
            else assert.equal(key, before, `${kind} ${dtype} D=${d}: row ${p} differs in a batch of ${rows}`);
          }
        }
        // A row alone (a batch of 1 at position 0) against the same values at other positions.
        for (const p of probe) {
          using x1 = dev.tensor(xv.subarray(p * d, (p + 1) * d), [1, d], { dtype });
          using y1 = (kind === "layer" ? layerNorm : rmsNorm)(x1, { weight: w, batchInvariant: true });
          assert.equal(JSON.stringify(bits(y1)), JSON.stringify(JSON.parse(seen.get(p)!)[3]), `row ${p} alone`);
        }
      }
    }
  },
);

gpuTest(
  "QK-norm over views of a fused QKV buffer (one launch; RMSNorm and LayerNorm in place, a residual, fp8 and int8) " +
    "equals the calls over copies",
  async () => {
    using dev = await open();
    for (const tokens of [1, 8, 2048]) checkQkViews(dev, tokens, 32, 8, 128);
  },
);

gpuTest(
  "norms over a transposed view ([tokens, heads, hd] over a head-major buffer) equal the calls over copies",
  async () => {
    using dev = await open();
    for (const tokens of [1, 8, 2048]) checkHeadMajorViews(dev, tokens, 8, 128);
  },
);

gpuTest("residual backward on CUDA: bitwise the unfused backward then the add; against the CPU backend", async () => {
  using dev = await open();
  using cpu = Device.open({ backend: "cpu" });
  const rows = 83, d = 5120;
  const hv = randoms(rows * d, 1), dyv = randoms(rows * d, 2), drv = randoms(rows * d, 3), wv = randoms(d, 4, 0.5, 1.5);
  const grads: Float32Array[] = [], normDx: Float32Array[] = [];
  for (const device of [dev, cpu]) {
    using h = device.tensor(hv, [rows, d], { dtype: "bf16" });
    using w = device.tensor(wv, [d]);
    using fwd = rmsNorm(h, { weight: w, stats: true });
    using dy = device.tensor(dyv, [rows, d], { dtype: "bf16" });
    using dRes = device.tensor(drv, [rows, d], { dtype: "bf16" });
    using dx = device.empty([rows, d], { dtype: "bf16" });
    dx.write(new Float32Array(rows * d).fill(NaN)); // poisoned: every element must be written
    const g = rmsNormBackward(dy, h, { rstd: fwd.rstd, weight: w, dResidual: dRes, dx });
    using _dw = g.dweight;
    const g0 = rmsNormBackward(dy, h, { rstd: fwd.rstd, weight: w });
    using _dx0 = g0.dx, _dw0 = g0.dweight;
    grads.push(dx.readSync());
    normDx.push(g0.dx.readSync());
    // On each device: the unfused backward, then the f32 sum with dResidual rounded to bf16, bit for bit.
    const add = dRes.readSync(), n0 = normDx[normDx.length - 1];
    using want = cpu.tensor(n0.map((v, i) => Math.fround(v + add[i])), [rows, d], { dtype: "bf16" });
    assert.deepEqual(dx.readBitsSync(), want.readBitsSync(), `${device.backend}: fused dx = unfused dx + dResidual`);
  }
  // GPU against the CPU backend: the norm's dx (f32 kernel against float64) may round to neighbouring bf16 values, half
  // an ulp (2^-8 relative) of it each, and the sum rounds again: |GPU − CPU| ≤ 2^-7 · (|norm dx| + |dx|), plus f32 noise.
  for (let i = 0; i < grads[0].length; i++) {
    const want = grads[1][i], tol = 2 ** -7 * (Math.abs(normDx[1][i]) + Math.abs(want)) + 1e-6;
    if (!(Math.abs(grads[0][i] - want) <= tol)) assert.fail(`dx[${i}] = ${grads[0][i]}, CPU ${want}, tolerance ${tol}`);
  }
});

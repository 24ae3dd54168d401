/** The fused kernels' plan (ops/plan_fused.ts): row geometry from (kind, D, dtype) alone, launch, kernel table. */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  FUSED_GEOMETRY,
  FUSED_KERNELS,
  FUSED_MAX_THREADS,
  FUSED_MAXV,
  FUSED_ROWS_BLOCK,
  FUSED_TRIPLES,
  type FusedGeometry,
  fusedGeometry,
  fusedKernelFor,
  fusedKernelName,
  fusedLaunch,
} from "../../ops/plan_fused.ts";
import type { PlanLimits } from "../../ops/plan.ts";
import { dtypeBytes, DTYPES } from "../../runtime/dtype.ts";
import { AUDIT_DS, probeRows } from "../../scripts/batch_invariance_audit.ts";

const H200: PlanLimits = {
  maxGridX: 2 ** 31 - 1,
  maxThreadsPerBlock: 1024,
  warpSize: 32,
  ccMajor: 9,
  multiprocessors: 132,
};
const KINDS = ["layer", "rms"] as const;

function geometry(kind: "layer" | "rms", d: number, dtype: string, limits = H200): FusedGeometry {
  const g = fusedGeometry(kind, d, dtype, limits);
  assert.ok(!("unsupported" in g), `D=${d} ${dtype}: ${JSON.stringify(g)}`);
  return g;
}
/** Every D to 70000 in steps that hit each chunk count near the layout edges, and the audit's D values. */
const SWEEP_DS = [
  ...new Set([...AUDIT_DS, ...Array.from({ length: 2100 }, (_, i) => 1 + i), 2047, 2048, 2049, 16383, 16384]),
]
  .concat(Array.from({ length: 700 }, (_, i) => 2100 + i * 97))
  .sort((a, b) => a - b);

test("the geometry takes no row count: the same for every row count and launch the audit probes", () => {
  assert.equal(fusedGeometry.length, 4, "fusedGeometry(kind, d, inputDtype, limits): no rows argument");
  const rows = probeRows(H200);
  for (const kind of KINDS) {
    for (const dtype of DTYPES) {
      for (const d of AUDIT_DS) {
        const maxD = 1024 * FUSED_MAXV * (16 / dtypeBytes(dtype));
        if (d > maxD) continue;
        const g = geometry(kind, d, dtype);
        assert.deepEqual(geometry(kind, d, dtype), g);
        for (const r of rows) {
          const l = fusedLaunch(g, r, H200);
          assert.deepEqual(l.block, [g.block, 1, 1], `D=${d} rows=${r}`);
          assert.equal(l.grid[0], Math.ceil(r / g.rowsPerBlock));
        }
      }
    }
  }
});

test("the grid covers the rows, rowsPerBlock at a time, and stops at the device's grid limit", () => {
  const g = geometry("rms", 768, "bf16"); // 96 chunks: 16 lanes, 16 rows per block
  assert.deepEqual([g.tpr, g.nv, g.block, g.rowsPerBlock], [16, 6, 256, 16]);
  for (const [rows, grid] of [[1, 1], [16, 1], [17, 2], [32, 2], [33, 3], [1_000_000, 62_500]]) {
    assert.equal(fusedLaunch(g, rows, H200).grid[0], grid, `rows=${rows}`);
  }
  assert.equal(fusedLaunch(g, 1_000_000, { maxGridX: 1000 }).grid[0], 1000);
  assert.equal(fusedLaunch(g, 0, H200).grid[0], 0, "no rows: nothing to launch");
  const b = geometry("layer", 8192, "bf16"); // 1024 chunks: a block of 128 threads per row
  assert.deepEqual([b.tpr, b.nv, b.block, b.rowsPerBlock], [128, 8, 128, 1]);
  assert.equal(fusedLaunch(b, 300, H200).grid[0], 300);
});

test("every geometry fits the kernel: tpr × nv chunks hold the row, nv ≤ 8, at most 1024 threads", () => {
  for (const kind of KINDS) {
    for (const dtype of DTYPES) {
      const vec = 16 / dtypeBytes(dtype), maxD = FUSED_MAX_THREADS * FUSED_MAXV * vec;
      for (const d of SWEEP_DS.filter((d) => d <= maxD)) {
        const g = geometry(kind, d, dtype), chunks = Math.ceil(d / vec), at = `${kind} ${dtype} D=${d}`;
        assert.ok(g.nv >= 1 && g.nv <= FUSED_MAXV, at);
        assert.ok(g.tpr * g.nv * vec >= d, `${at}: the row fits`);
        assert.equal(g.nv, Math.ceil(chunks / g.tpr), `${at}: no thread holds only padding past its last chunk`);
        assert.ok(g.block <= FUSED_MAX_THREADS, at);
        if (g.tpr <= 32 && g.rule === "fused.lanes") {
          assert.equal(g.tpr & (g.tpr - 1), 0, `${at}: tpr a power of two`);
          assert.deepEqual([g.block, g.rowsPerBlock * g.tpr], [FUSED_ROWS_BLOCK, FUSED_ROWS_BLOCK], at);
        } else {
          assert.equal(g.rule, "fused.block", at);
          assert.ok(g.tpr % 32 === 0 && chunks > 32 * FUSED_MAXV, `${at}: whole warps, only past 256 chunks`);
          assert.deepEqual([g.block, g.rowsPerBlock], [g.tpr, 1], at);
          assert.ok(g.nv >= 5, `${at}: a block per row keeps 5–8 chunks a thread (nv ${g.nv})`);
        }
        // LayerNorm's lanes fill 5–8 chunks once past one lane; RMSNorm's aim for 4 (3–4) up to 16 lanes.
        if (g.rule === "fused.lanes" && chunks > 8) {
          const [lo, hi] = kind === "layer" || g.tpr === 32 ? [5, 8] : g.tpr === 16 && chunks > 64 ? [5, 8] : [3, 4];
          assert.ok(g.nv >= lo && g.nv <= hi, `${at}: nv ${g.nv} at tpr ${g.tpr}`);
        }
      }
    }
  }
});

test("the geometry table: ids, and the lanes layout before the block layout", () => {
  assert.deepEqual(FUSED_GEOMETRY.map((r) => r.id), ["fused.lanes", "fused.block"]);
  for (const r of FUSED_GEOMETRY) assert.ok(r.why.length > 20);
  assert.equal(geometry("rms", 2048, "bf16").rule, "fused.lanes"); // 256 chunks: 32 lanes × 8
  assert.equal(geometry("rms", 2056, "bf16").rule, "fused.block");
  assert.equal(geometry("layer", 1024, "f32").tpr, 32);
});

test("unsupported rows, dtypes and limits give a sentence naming what is wrong", () => {
  const why = (r: ReturnType<typeof fusedGeometry>): string => {
    assert.ok("unsupported" in r, JSON.stringify(r));
    return r.unsupported;
  };
  assert.match(why(fusedGeometry("rms", 65537, "bf16", H200)), /at most 65536 bf16 elements .*not d = 65537/);
  assert.match(why(fusedGeometry("layer", 32769, "f32", H200)), /at most 32768 f32 elements/);
  assert.equal("unsupported" in fusedGeometry("layer", 65536, "f16", H200), false);
  assert.match(why(fusedGeometry("rms", 0, "f16", H200)), /d must be a whole number ≥ 1, not 0/);
  assert.match(why(fusedGeometry("rms", 2.5, "f16", H200)), /not 2\.5/);
  assert.match(why(fusedGeometry("rms", 128, "fp8e4m3", H200)), /x in f32, f16 or bf16, not fp8e4m3/);
  assert.match(why(fusedGeometry("rms", 65536, "bf16", { ...H200, maxThreadsPerBlock: 512 })), /512 threads/);
  assert.match(why(fusedGeometry("other" as "rms", 128, "f16", H200)), /kind must be/);
});

test("kernel names: 20 built triples per kind, each named as kernels/fused.cu names them", () => {
  assert.equal(FUSED_KERNELS.length, 40);
  assert.equal(new Set(FUSED_KERNELS).size, 40);
  for (const k of FUSED_KERNELS) {
    assert.match(k, /^nk_fused_(ln|rms)_(f32|f16|bf16)_(f32|f16|bf16|fp8e4m3|fp8e5m2|int8)_(f32|f16|bf16)$/);
  }
  assert.equal(fusedKernelName("layer", "bf16", "fp8e4m3", "f32"), "nk_fused_ln_bf16_fp8e4m3_f32");
  const counts = FUSED_TRIPLES.map((r) => r.to.length * r.tw.length);
  assert.deepEqual(counts, [4, 8, 8]);
  for (const kind of KINDS) {
    for (const r of FUSED_TRIPLES) {
      for (const to of r.to) {
        for (const tw of r.tw) {
          const k = fusedKernelFor(kind, r.ti, to, tw);
          assert.ok("kernel" in k && FUSED_KERNELS.includes(k.kernel), JSON.stringify(k));
        }
      }
    }
  }
});

test("dtype triples without a fused kernel give a sentence naming the dtype", () => {
  const why = (r: ReturnType<typeof fusedKernelFor>): string => {
    assert.ok("unsupported" in r, JSON.stringify(r));
    return r.unsupported;
  };
  assert.match(
    why(fusedKernelFor("rms", "f16", "f32", "f16")),
    /f16 x's output as f16, fp8e4m3, fp8e5m2, int8, not f32/,
  );
  assert.match(why(fusedKernelFor("rms", "f32", "f32", "f16")), /f32 x's weights as f32, not f16/);
  assert.match(why(fusedKernelFor("layer", "bf16", "bf16", "f16")), /bf16 x's weights as f32 or bf16, not f16/);
  assert.match(why(fusedKernelFor("layer", "int8", "int8", "f32")), /x in f32, f16 or bf16, not int8/);
});

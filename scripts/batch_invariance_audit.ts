/**
 * The batch-invariance audit (scripts/batch-invariance.ts writes its tables into docs/batch-invariance.md): for each
 * D, dtype triple and kind, the row counts 1 … 1,000,000 at which the tuned forward plan (ops/plan.ts planNorm) gives a
 * row another summation order (scripts/reduction_geometry.ts), on the H200's limits. Pure: no I/O.
 */
import { type DType, dtypeBytes, DTYPES } from "../runtime/dtype.ts";
import {
  type LaunchPlan,
  MAPPING_RULES,
  MAX_BLOCK_THREADS,
  type NormKind,
  type PlanInput,
  type PlanLimits,
  planNorm,
  WIDE_MAX_ROW_BYTES,
} from "../ops/plan.ts";
import { type ReductionGeometry, reductionGeometry, sameReduction } from "./reduction_geometry.ts";

/** The H200 (132 SMs, compute capability 9.0): tests/fixtures/fake_cuda.ts FAKE_H200 as planLimits reads it. */
export const H200_LIMITS: PlanLimits = {
  maxGridX: 2 ** 31 - 1,
  maxThreadsPerBlock: 1024,
  warpSize: 32,
  ccMajor: 9,
  multiprocessors: 132,
};
/** bench/bench.ts's grid, and the D values of the fused kernels' issue (odd sizes: the masked path). */
export const GRID_DS = [128, 512, 768, 1024, 2048, 4096, 5120, 8192, 12288, 16384, 32768, 65536, 131072];
export const EXTRA_DS = [8, 768, 769, 770, 771, 5120, 5124, 5125, 5126, 8192, 8199];
export const AUDIT_DS = [...new Set([...GRID_DS, ...EXTRA_DS])].sort((a, b) => a - b);
export const MAX_ROWS = 1_000_000;
/** Every built (x, y, weight) triple: weights f32 or x's dtype (kernels/norm.cu NK_FWD_DTYPES). */
export const TRIPLES: readonly [DType, DType, DType][] = DTYPES.flatMap((ti) =>
  DTYPES.flatMap((to) => [...new Set<DType>(["f32", ti])].map((tw) => [ti, to, tw] as [DType, DType, DType]))
);

/**
 * The row counts probed: every count to 1024 (past every rows-per-SM threshold of MAPPING_RULES on the H200: 2 per SM
 * at most), each rule threshold ± 1, then about 40 counts per decade to MAX_ROWS.
 */
export function probeRows(limits: PlanLimits): number[] {
  const s = new Set<number>();
  for (let r = 1; r <= 1024; r++) s.add(r);
  for (const rule of MAPPING_RULES) {
    for (const per of [rule.maxRowsPerSM, ...Object.values(rule.minRowsPerSM ?? {})]) {
      if (per === undefined) continue;
      for (const dr of [-1, 0, 1]) s.add(per * limits.multiprocessors + dr);
    }
  }
  for (let e = 3; e <= 6; e += 0.025) s.add(Math.round(10 ** e));
  s.add(MAX_ROWS);
  return [...s].filter((r) => r >= 1 && r <= MAX_ROWS).sort((a, b) => a - b);
}

/** The MAPPING_RULES row that gave `plan` (read back from its mapping and geometry). */
export function ruleOf(input: PlanInput, plan: LaunchPlan, limits: PlanLimits): string {
  switch (plan.mapping) {
    case "block":
      return plan.tpr > MAX_BLOCK_THREADS ? "fwd.block-1024" : "fwd.block";
    case "wide":
      return input.kind === "layer" && input.rows >= limits.multiprocessors &&
          input.d * dtypeBytes(input.inputDtype) <= WIDE_MAX_ROW_BYTES
        ? "fwd.wide-l2"
        : "fwd.wide";
    default:
      return `fwd.${plan.mapping}`;
  }
}

/** A run of row counts with one plan geometry. */
export interface Segment {
  from: number;
  to: number;
  rule: string;
  /** Mapping and geometry, e.g. "latency 96t", "rows 16 lanes", "cluster 2×512t". */
  what: string;
  geometry: ReductionGeometry;
}
export interface CaseAudit {
  kind: NormKind;
  triple: [DType, DType, DType];
  d: number;
  /** "vector": aligned, contiguous rows with D a multiple of the chunk (fwdFull); "masked": the masked path. */
  path: "vector" | "masked";
  segments: Segment[];
  /** Row counts r where rows r − 1 and r sum a row in different orders. */
  boundaries: number[];
  /** LayerNorm's one-pass `rows` kernel: rows deciding the centred fallback together (1: none). */
  sharedDecision: number;
}

/** The mapping and geometry of the kernel a call on `path` takes (the plan's fullKernel on the vector path). */
const describe = (p: LaunchPlan, path: "vector" | "masked"): string => {
  const v = (path === "vector" && p.fullKernel ? p.fullKernel : p.kernel).split("_")[2];
  if (v === "rowstile") return "rowstile";
  if (p.mapping === "rows") return `${v} ${p.tpr} lanes`;
  if (p.mapping === "cluster") return `cluster ${p.cluster}×${p.tpr}t`;
  return `${v} ${p.tpr}t`;
};

/** Runs of row counts (of `rows`) with one plan geometry: the plan at each run's first count. */
export function planRuns(
  kind: NormKind,
  triple: [DType, DType, DType],
  d: number,
  limits: PlanLimits = H200_LIMITS,
  rows: number[] = probeRows(limits),
): { from: number; to: number; rule: string; input: PlanInput; plan: LaunchPlan }[] {
  const [inputDtype, outputDtype, paramDtype] = triple;
  const runs: ReturnType<typeof planRuns> = [];
  let lastKey = "";
  for (const r of rows) {
    const input: PlanInput = { kind, rows: r, d, inputDtype, outputDtype, paramDtype };
    const res = planNorm(input, limits);
    if (!("plan" in res)) throw new Error(`no plan: ${res.unsupported}`);
    const p = res.plan, rule = ruleOf(input, p, limits);
    const key = `${p.kernel}/${p.fullKernel}/${p.tpr}/${p.nv}/${p.cluster}/${p.block[0]}/${rule}`;
    if (key === lastKey) runs.at(-1)!.to = r;
    else runs.push({ from: r, to: r, rule, input, plan: p });
    lastKey = key;
  }
  return runs;
}

/** The audit of one case: its segments over probeRows and where the summation order changes. */
export function auditCase(
  kind: NormKind,
  triple: [DType, DType, DType],
  d: number,
  path: "vector" | "masked",
  limits: PlanLimits = H200_LIMITS,
  runs: ReturnType<typeof planRuns> = planRuns(kind, triple, d, limits),
): CaseAudit {
  const segments: Segment[] = runs.map(({ from, to, rule, input, plan }) => ({
    from,
    to,
    rule,
    what: describe(plan, path),
    geometry: reductionGeometry(input, plan, path === "vector"),
  }));
  const boundaries: number[] = [];
  for (let i = 1; i < segments.length; i++) {
    if (!sameReduction(segments[i - 1].geometry, segments[i].geometry)) boundaries.push(segments[i].from);
  }
  return {
    kind,
    triple,
    d,
    path,
    segments,
    boundaries,
    sharedDecision: Math.max(...segments.map((s) => s.geometry.sharedDecision)),
  };
}

/** Every case: AUDIT_DS × TRIPLES × kinds, on the vector path where D allows it and on the masked path. */
export function auditAll(limits: PlanLimits = H200_LIMITS): CaseAudit[] {
  const rows = probeRows(limits), out: CaseAudit[] = [];
  for (const kind of ["layer", "rms"] as const) {
    for (const triple of TRIPLES) {
      for (const d of AUDIT_DS) {
        const runs = planRuns(kind, triple, d, limits, rows);
        if (d % (16 / dtypeBytes(triple[0])) === 0) out.push(auditCase(kind, triple, d, "vector", limits, runs));
        out.push(auditCase(kind, triple, d, "masked", limits, runs));
      }
    }
  }
  return out;
}

/** The row-count threshold rules (MAPPING_RULES rows with a rows-per-SM bound), for the page. */
export function rowRules(limits: PlanLimits = H200_LIMITS): { id: string; bound: string }[] {
  const sms = limits.multiprocessors;
  return MAPPING_RULES.flatMap((r) => {
    const parts: string[] = [];
    if (r.maxRowsPerSM !== undefined) parts.push(`rows ≤ ${r.maxRowsPerSM * sms}`);
    for (const [k, per] of Object.entries(r.minRowsPerSM ?? {})) parts.push(`${k}: rows ≥ ${per! * sms}`);
    return parts.length ? [{ id: r.id, bound: parts.join(", ") }] : [];
  });
}

// ---------------------------------------------------------------- the page's tables
const KIND_NAME: Record<NormKind, string> = { layer: "LN", rms: "RMS" };
const range = (ds: number[]): string => ds.sort((a, b) => a - b).join(", ");

/** Summary counts: cases, cases whose order changes with the row count, and by path. */
export function auditSummary(cases: CaseAudit[]): string {
  const n = (f: (c: CaseAudit) => boolean) => cases.filter(f).length;
  const varying = (c: CaseAudit) => c.boundaries.length > 0;
  const lines = [
    `| | cases | order changes with the row count | plan changes, order does not | one plan |`,
    `|---|---:|---:|---:|---:|`,
  ];
  for (
    const [label, f] of [
      ["vector path", (c: CaseAudit) => c.path === "vector"],
      ["masked path", (c: CaseAudit) => c.path === "masked"],
      ["all", () => true],
    ] as const
  ) {
    lines.push(
      `| ${label} | ${n(f)} | ${n((c) => f(c) && varying(c))} | ${
        n((c) => f(c) && !varying(c) && c.segments.length > 1)
      } | ${n((c) => f(c) && c.segments.length === 1)} |`,
    );
  }
  return lines.join("\n");
}

/**
 * The compact table: one line per (kind, path, row count of the change, rule below → rule above), with the D values
 * per x dtype where it happens (a D is listed for a dtype when any of its triples changes there).
 */
export function boundaryTable(cases: CaseAudit[]): string {
  const groups = new Map<string, Map<DType, Set<number>>>();
  for (const c of cases) {
    for (const b of c.boundaries) {
      const i = c.segments.findIndex((s) => s.from === b);
      const below = c.segments[i - 1], above = c.segments[i];
      const key = [KIND_NAME[c.kind], c.path, b, `${below.rule} → ${above.rule}`].join("|");
      const byDtype = groups.get(key) ?? new Map<DType, Set<number>>();
      groups.set(key, byDtype);
      const ds = byDtype.get(c.triple[0]) ?? new Set<number>();
      byDtype.set(c.triple[0], ds.add(c.d));
    }
  }
  const lines = [
    `| kind | path | changes at rows | rule below → rule above | D (x dtype) |`,
    `|---|---|---:|---|---|`,
  ];
  for (const [key, byDtype] of [...groups].sort(([a], [b]) => a.localeCompare(b))) {
    const ds = DTYPES.filter((t) => byDtype.has(t)).map((t) => `${t}: ${range([...byDtype.get(t)!])}`).join("; ");
    lines.push(`| ${key.split("|").join(" | ")} | ${ds} |`);
  }
  return lines.join("\n");
}

/**
 * Every case whose plan changes with the row count, one line per (kind, x dtype, D, path) and distinct segments: the
 * geometry on each side. Triples listed where they differ from the x dtype's others.
 */
export function caseTable(cases: CaseAudit[]): string {
  const lines = [
    `| kind | x | D | path | segments (rows: rule, kernel geometry, statistics) | order changes at | triples |`,
    `|---|---|---:|---|---|---|---|`,
  ];
  const byKey = new Map<string, CaseAudit[]>();
  for (const c of cases.filter((c) => c.segments.length > 1)) {
    const seg = c.segments.map((s) => `${s.from}–${s.to}: ${s.rule}, ${s.what}, ${s.geometry.stats}`).join("; ");
    const key = [KIND_NAME[c.kind], c.triple[0], c.d, c.path, seg, c.boundaries.join(", ") || "—"].join("|");
    byKey.set(key, [...(byKey.get(key) ?? []), c]);
  }
  for (const [key, cs] of byKey) {
    const all = TRIPLES.filter((t) => t[0] === cs[0].triple[0]).length;
    const triples = cs.length === all ? "all" : cs.map((c) => c.triple.join("/")).join(", ");
    lines.push(`| ${key.split("|").join(" | ")} | ${triples} |`);
  }
  return lines.join("\n");
}

/** The cases summed in one order at every row count, per kind and path: D per x dtype (every triple of it). */
export function invariantTable(cases: CaseAudit[]): string {
  const lines = [`| kind | path | D (x dtype) |`, `|---|---|---|`];
  for (const kind of ["layer", "rms"] as const) {
    for (const path of ["vector", "masked"] as const) {
      const of = cases.filter((c) => c.kind === kind && c.path === path);
      const ds = DTYPES.map((t) => {
        const mine = of.filter((c) => c.triple[0] === t);
        const all = [...new Set(mine.map((c) => c.d))].filter((d) =>
          mine.filter((c) => c.d === d).every((c) => c.boundaries.length === 0)
        );
        return all.length ? `${t}: ${range(all)}` : "";
      }).filter((s) => s).join("; ");
      lines.push(`| ${KIND_NAME[kind]} | ${path} | ${ds || "—"} |`);
    }
  }
  return lines.join("\n");
}

/** LayerNorm cases whose one-pass `rows` kernel decides the centred fallback for several rows at once. */
export function sharedDecisionTable(cases: CaseAudit[]): string {
  const lines = [`| x dtype | D | rows deciding together | from rows |`, `|---|---:|---:|---:|`];
  const seen = new Set<string>();
  for (const c of cases.filter((c) => c.sharedDecision > 1)) {
    const s = c.segments.find((s) => s.geometry.sharedDecision > 1)!;
    const key = `${c.triple[0]}|${c.d}|${s.geometry.sharedDecision}|${s.from}`;
    if (!seen.has(key)) seen.add(key), lines.push(`| ${key.split("|").join(" | ")} |`);
  }
  return lines.join("\n");
}

/** The generated part of docs/batch-invariance.md (between the audit markers). */
export function auditSection(limits: PlanLimits = H200_LIMITS): string {
  const cases = auditAll(limits);
  return [
    `Limits: ${limits.multiprocessors} SMs, compute capability ${limits.ccMajor}, ${limits.maxThreadsPerBlock} threads ` +
    `per block. D: ${AUDIT_DS.join(", ")}. ${TRIPLES.length} dtype triples × 2 kinds; rows 1 … ${MAX_ROWS} ` +
    `(${probeRows(limits).length} counts probed: every count to 1024, each rule threshold ± 1, then 40 a decade).`,
    "",
    "### Summary",
    "",
    auditSummary(cases),
    "",
    "### Where the order changes",
    "",
    boundaryTable(cases),
    "",
    "### One order at every row count",
    "",
    invariantTable(cases),
    "",
    "### Rows that share LayerNorm's one-pass decision",
    "",
    sharedDecisionTable(cases),
    "",
    "<details><summary>Every case whose plan changes with the row count</summary>",
    "",
    caseTable(cases),
    "",
    "</details>",
  ].join("\n");
}

export const AUDIT_BEGIN = "<!-- batch-invariance audit: begin (scripts/batch-invariance.ts writes this part) -->";
export const AUDIT_END = "<!-- batch-invariance audit: end -->";
/**
 * `page` and `other` up to deno fmt's layout (table cell padding, separator widths, wrapped prose): whether the page
 * still holds what the audit writes once formatted.
 */
export function sameUpToFormat(page: string, other: string): boolean {
  const norm = (t: string) => t.replace(/-{3,}/g, "---").replace(/\s*\|\s*/g, "|").replace(/\s+/g, " ").trim();
  return norm(page) === norm(other);
}

/** `page` with the part between the markers replaced by `section`. */
export function withAuditSection(page: string, section: string): string {
  const i = page.indexOf(AUDIT_BEGIN), j = page.indexOf(AUDIT_END);
  if (i < 0 || j < i) throw new Error("docs/batch-invariance.md: the audit markers are missing");
  return page.slice(0, i + AUDIT_BEGIN.length) + "\n\n" + section + "\n\n" + page.slice(j);
}

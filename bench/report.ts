/**
 * Turns the JSON of bench/bench.ts (normkit) and bench/compare_torch.py or compare_torch_bwd.py (torch) from one
 * GPU run into a markdown table (every case, with the cases short of the targets) and an SVG chart: GB/s against D
 * per kind and dtype, with torch eager, torch.compile and the copy ceiling.
 *
 *   deno run -A bench/report.ts normkit.json torch.json [--svg bench/forward.svg] [--title "..."] [--md bench/RESULTS-section.md]
 */
import process from "node:process";
import { readFileSync, writeFileSync } from "node:fs";

interface NkRow {
  kind: string;
  dtype: string;
  d: number;
  rows: number;
  us: number;
  gbs: number;
  pctCopy: number;
}
interface TorchRow {
  kind: string;
  dtype: string;
  d: number;
  eager_gbs: number;
  compile_gbs?: number;
  eager_us: number;
  compile_us?: number;
}

const argv = process.argv.slice(2);
const opt = (k: string, dflt: string): string => (argv.includes(k) ? argv[argv.indexOf(k) + 1] : dflt);
const [nkPath, torchPath] = argv.filter((a, i) => !a.startsWith("--") && !argv[i - 1]?.startsWith("--"));
const nk = JSON.parse(readFileSync(nkPath, "utf8"));
const torch = torchPath ? JSON.parse(readFileSync(torchPath, "utf8")) : { results: [], copyGBs: NaN };
const svgPath = opt("--svg", "bench/forward.svg");
const title = opt("--title", "normkit forward");
const mdPath = opt("--md", "");

// The targets: forward ≥ 95% of copy, ≥ 1.0× compile, ≥ 1.5× eager (16-bit);
// backward ≥ 85% of copy, ≥ 1.5× compile, ≥ 2× eager (every dtype).
const bwd = nk.pass === "backward";
const T = bwd
  ? { copy: 85, compile: 1.5, eager: 2.0, eagerF32: true }
  : { copy: 95, compile: 1.0, eager: 1.5, eagerF32: false };
const key = (r: { kind: string; dtype: string; d: number }): string => `${r.kind}/${r.dtype}/${r.d}`;
const tmap = new Map<string, TorchRow>(torch.results.map((r: TorchRow) => [key(r), r]));

// ---- markdown table
const lines: string[] = [];
lines.push(`### ${title}: ${nk.device} (${nk.arch}), ${nk.runtime}, ${nk.date.slice(0, 10)}`, "");
lines.push(
  `Copy ceiling measured in the same run: ${nk.copyGBs.toFixed(0)} GB/s (normkit run), ${
    Number(torch.copyGBs).toFixed(0)
  } GB/s (torch run).`,
  "",
);
lines.push(
  "| kind | dtype | D | rows | µs | GB/s | % copy | torch eager GB/s | torch.compile GB/s | × eager | × compile |",
);
lines.push("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
const short: string[] = [];
for (const r of nk.results as NkRow[]) {
  const t = tmap.get(key(r));
  const xe = t ? r.gbs / t.eager_gbs : NaN, xc = t?.compile_gbs ? r.gbs / t.compile_gbs : NaN;
  lines.push(
    `| ${r.kind} | ${r.dtype} | ${r.d} | ${r.rows} | ${r.us.toFixed(1)} | ${r.gbs.toFixed(0)} | ${
      r.pctCopy.toFixed(1)
    } | ${t ? t.eager_gbs.toFixed(0) : "–"} | ${t?.compile_gbs ? t.compile_gbs.toFixed(0) : "–"} | ${xe.toFixed(2)} | ${
      xc.toFixed(2)
    } |`,
  );
  const misses = [];
  if (r.pctCopy < T.copy) misses.push(`${r.pctCopy.toFixed(1)}% of copy`);
  if (xc < T.compile) misses.push(`${xc.toFixed(2)}× torch.compile`);
  if ((T.eagerF32 || r.dtype !== "f32") && xe < T.eager) misses.push(`${xe.toFixed(2)}× eager`);
  if (misses.length) short.push(`- ${r.kind} ${r.dtype} D=${r.d}: ${misses.join(", ")}`);
}
const targets = `≥ ${T.copy}% of copy, ≥ ${T.compile}× torch.compile, ≥ ${T.eager}× eager${
  T.eagerF32 ? "" : " for bf16/f16"
}`;
lines.push("", `Cases short of the targets (${targets}): ${short.length}`, ...short, "");
if (nk.latency?.length) {
  lines.push("Host-inclusive (launch + synchronize, mitata p50):", "");
  for (const l of nk.latency) lines.push(`- bf16 [${l.rows}, ${l.d}]: ${l.hostUs.toFixed(2)} µs`);
  lines.push("");
}
const md = lines.join("\n");
if (mdPath) writeFileSync(mdPath, md);
console.log(md);

// ---- SVG: 2 kinds × 3 dtypes panels, log2(D) on x, GB/s on y
const kinds = ["layer", "rms"], dtypes = ["f32", "bf16", "f16"];
const W = 360, H = 240, M = { l: 48, r: 10, t: 26, b: 34 };
const ds = [...new Set((nk.results as NkRow[]).map((r) => r.d))].sort((a, b) => a - b);
const ceil = Math.max(nk.copyGBs, torch.copyGBs || 0);
const ymax = Math.ceil((ceil * 1.08) / 500) * 500;
const x = (d: number): number =>
  M.l +
  ((Math.log2(d) - Math.log2(ds[0])) / Math.max(1e-9, Math.log2(ds.at(-1)!) - Math.log2(ds[0]))) * (W - M.l - M.r);
const y = (g: number): number => H - M.b - (g / ymax) * (H - M.t - M.b);
const series = [
  { name: "normkit", color: "#d62728", get: (r: NkRow) => r.gbs },
  { name: "torch.compile", color: "#1f77b4", get: (r: NkRow) => tmap.get(key(r))?.compile_gbs },
  { name: "torch eager", color: "#7f7f7f", get: (r: NkRow) => tmap.get(key(r))?.eager_gbs },
];
// Every D gets a tick; labels go to powers of two first, then to the other D where they do not crowd a label.
const MIN_LABEL_GAP = 24;
const labelled: number[] = [];
for (const d of [...ds.filter((d) => (d & (d - 1)) === 0), ...ds.filter((d) => (d & (d - 1)) !== 0)]) {
  if (labelled.every((l) => Math.abs(x(l) - x(d)) >= MIN_LABEL_GAP)) labelled.push(d);
}
const parts: string[] = [];
kinds.forEach((kind, ki) =>
  dtypes.forEach((dtype, di) => {
    const ox = di * W, oy = ki * H + 30;
    const rows = (nk.results as NkRow[]).filter((r) => r.kind === kind && r.dtype === dtype).sort((a, b) => a.d - b.d);
    parts.push(`<g transform="translate(${ox},${oy})">`);
    parts.push(
      `<text x="${M.l}" y="16" font-size="13" font-weight="bold">${
        kind === "layer" ? "LayerNorm" : "RMSNorm"
      } ${dtype}</text>`,
    );
    for (let g = 0; g <= ymax; g += 1000) {
      parts.push(
        `<line x1="${M.l}" x2="${W - M.r}" y1="${y(g)}" y2="${y(g)}" stroke="#eee"/><text x="${M.l - 4}" y="${
          y(g) + 4
        }" font-size="10" text-anchor="end">${g}</text>`,
      );
    }
    for (const d of ds) {
      parts.push(`<line x1="${x(d)}" x2="${x(d)}" y1="${H - M.b}" y2="${H - M.b + 3}" stroke="#999"/>`);
    }
    for (const d of labelled) {
      parts.push(
        `<text x="${x(d)}" y="${H - M.b + 14}" font-size="9" text-anchor="middle">${
          d >= 1024 ? `${d / 1024}K` : d
        }</text>`,
      );
    }
    parts.push(
      `<line x1="${M.l}" x2="${W - M.r}" y1="${y(nk.copyGBs)}" y2="${
        y(nk.copyGBs)
      }" stroke="#2ca02c" stroke-dasharray="4 3"/>`,
    );
    for (const s of series) {
      const pts = rows.map((r) => [r.d, s.get(r)] as const).filter(([, g]) => g !== undefined && Number.isFinite(g));
      if (pts.length) {
        parts.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${
          pts.map(([d, g]) => `${x(d).toFixed(1)},${y(g!).toFixed(1)}`).join(" ")
        }"/>`);
      }
      for (const [d, g] of pts) {
        parts.push(`<circle cx="${x(d).toFixed(1)}" cy="${y(g!).toFixed(1)}" r="2" fill="${s.color}"/>`);
      }
    }
    parts.push(
      `<text x="${(W + M.l) / 2}" y="${H - 6}" font-size="10" text-anchor="middle">D (hidden size)</text></g>`,
    );
  })
);
const legend = [...series.map((s) => [s.name, s.color]), ["copy ceiling", "#2ca02c"]]
  .map(([n, c], i) =>
    `<rect x="${10 + i * 150}" y="8" width="14" height="4" fill="${c}"/><text x="${
      28 + i * 150
    }" y="14" font-size="12">${n}</text>`
  ).join("");
const svg =
  `<svg xmlns="http://www.w3.org/2000/svg" width="${3 * W}" height="${2 * H + 30}" font-family="sans-serif">` +
  `<rect width="100%" height="100%" fill="white"/>${legend}<text x="${
    3 * W - 10
  }" y="14" font-size="11" text-anchor="end">${title}: GB/s (${bwd ? 3 : 2}·N·D·bytes) — ${nk.device}</text>${
    parts.join("")
  }</svg>`;
writeFileSync(svgPath, svg);

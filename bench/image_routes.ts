/**
 * How to store a kernel image, measured: the sm_90 image (precompiled/norm_sm90.fatbin) got into a fresh process as
 *
 * - file:   the binary file, read with the runtime's readFile (what loadKernels does; docs/loading.md);
 * - json:   a JSON module holding the image as base64, imported by a computed URL, then decoded;
 * - js:     the same string in a .js module (`export default "..."`), imported and decoded.
 *
 * Each route in a fresh process of the running runtime, warm caches, median of N; in-process wall time from
 * before the read/import to the bytes in hand. A micro-benchmark, not a test.
 *
 *   deno run -A bench/image_routes.ts [--runs 11]      bun bench/image_routes.ts [--runs 11]
 */
import process from "node:process";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Buffer } from "node:buffer";

const runtime = "Deno" in globalThis ? "deno" : "bun";
const ROUTES = ["file", "json", "js"] as const;
type Route = typeof ROUTES[number];

if (process.argv.includes("--child")) {
  const [route, dir] = process.argv.slice(process.argv.indexOf("--child") + 1) as [Route, string];
  const base = pathToFileURL(dir + "/");
  const t0 = performance.now();
  let bytes: Uint8Array;
  if (route === "file") {
    const D = (globalThis as { Deno?: { readFile(u: URL): Promise<Uint8Array> } }).Deno;
    bytes = D
      ? await D.readFile(new URL("image.fatbin", base))
      : new Uint8Array(readFileSync(new URL("image.fatbin", base)));
  } else {
    const url = new URL(route === "json" ? "image.json" : "image.js", base).href;
    const m = route === "json" ? await import(url, { with: { type: "json" } }) : await import(url);
    bytes = new Uint8Array(Buffer.from(m.default as string, "base64"));
  }
  console.log(JSON.stringify({ ms: performance.now() - t0, bytes: bytes.length }));
  process.exit(0);
}

const runs = Number(process.argv[process.argv.indexOf("--runs") + 1]) || 11;
const self = fileURLToPath(import.meta.url);
const image = readFileSync(new URL("../precompiled/norm_sm90.fatbin", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "normkit-routes-"));
try {
  const b64 = image.toString("base64");
  writeFileSync(join(dir, "image.fatbin"), image);
  writeFileSync(join(dir, "image.json"), JSON.stringify(b64));
  writeFileSync(join(dir, "image.js"), `export default "${b64}";\n`);
  const child = (route: Route): number => {
    const args = runtime === "deno" ? ["run", "-A", self, "--child", route, dir] : [self, "--child", route, dir];
    const r = spawnSync(process.execPath, args, { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`${route}: ${r.stderr}`);
    const out = JSON.parse(r.stdout.trim().split("\n").pop()!);
    if (out.bytes !== image.length) throw new Error(`${route}: ${out.bytes} bytes, expected ${image.length}`);
    return out.ms;
  };
  for (const r of ROUTES) child(r); // warm caches
  const samples: Record<Route, number[]> = { file: [], json: [], js: [] };
  for (let i = 0; i < runs; i++) for (const r of ROUTES) samples[r].push(child(r)); // interleaved
  const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
  for (const r of ROUTES) {
    const s = [...samples[r]].sort((a, b) => a - b);
    console.log(
      `${runtime} ${r.padEnd(4)} ${image.length} bytes: median ${median(s).toFixed(1)} ms (min ${
        s[0].toFixed(1)
      }, max ${s[s.length - 1].toFixed(1)}, ${runs} runs)`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

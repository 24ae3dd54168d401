/**
 * The package imported by URL, served over HTTP from 127.0.0.1 (the permissions docs/install.md lists):
 * - run as the main module (`deno run --allow-ffi URL`): no permission beyond --allow-ffi on the CPU (no kernel
 *   image is read there; the environment is read only where permitted); NORMKIT_CUDA_LIB is honoured when
 *   --allow-env grants it;
 * - imported from the user's own file: that import needs --allow-import for the host, and nothing more on the CPU;
 * - a GPU device's kernel image is fetched from the same host by loadKernels: --allow-net for it (docs/loading.md);
 * - the server must label .ts files with a TypeScript or JavaScript media type: Deno refuses the type
 *   python3 -m http.server sends for .ts where /etc/mime.types maps it to Qt Linguist (text/vnd.trolltech.linguist).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const denoBin = [join(root, "node_modules/.bin/deno"), "/usr/local/bin/deno"].find((p) => existsSync(p));
const skip = denoBin ? undefined : "no deno binary in node_modules/.bin or /usr/local/bin";

/** The content type of .ts files: what web servers that know TypeScript send. */
const TS_TYPE = "application/typescript";

function serve(tsType: string): Promise<{ server: Server; base: string }> {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname));
    const file = join(root, path);
    if (!file.startsWith(root + "/") || !existsSync(file) || path.includes("node_modules")) {
      res.writeHead(404).end();
      return;
    }
    // As web servers label them (the kernel images are binary: application/octet-stream).
    const type = file.endsWith(".ts")
      ? tsType
      : file.endsWith(".json")
      ? "application/json"
      : "application/octet-stream";
    res.writeHead(200, { "content-type": type }).end(readFileSync(file));
  });
  return new Promise((ok) =>
    server.listen(0, "127.0.0.1", () => {
      const a = server.address() as { port: number };
      ok({ server, base: `http://127.0.0.1:${a.port}` });
    })
  );
}

interface Run {
  /** deno run's flags; `{host}` is replaced by the server's host:port. */
  args: string[];
  env?: Record<string, string>;
  /** A user's script (its imports start with `{base}`) run from a local file; else the quickstart by URL. */
  script?: string;
  tsType?: string;
}

async function runDeno({ args, env = {}, script, tsType = TS_TYPE }: Run): Promise<{ code: number; out: string }> {
  const { server, base } = await serve(tsType);
  const work = mkdtempSync(join(tmpdir(), "normkit-url-"));
  try {
    const host = new URL(base).host;
    let main = `${base}/examples/quickstart.ts`;
    if (script) {
      main = join(work, "main.ts");
      writeFileSync(main, script.replaceAll("{base}", base));
    }
    // Asynchronous spawn: a synchronous one would block the event loop that serves the files.
    const child = spawn(denoBin!, ["run", ...args.map((a) => a.replaceAll("{host}", host)), main], {
      cwd: work, // no deno.json here: a user's fresh directory
      env: { PATH: process.env.PATH ?? "", HOME: work, DENO_DIR: join(work, "cache"), NO_COLOR: "1", ...env },
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const code: number = await new Promise((ok) => child.on("close", (c) => ok(c ?? -1)));
    return { code, out };
  } finally {
    server.close();
    rmSync(work, { recursive: true, force: true });
  }
}

test("quickstart by URL from 127.0.0.1 under Deno with only --allow-ffi", { skip, timeout: 120_000 }, async () => {
  const { code, out } = await runDeno({ args: ["--allow-ffi"] });
  assert.equal(code, 0, out);
  assert.match(out, /backend: (cuda|cpu)/);
  assert.match(out, /max abs error vs float64: [0-9.e+-]+/);
  assert.doesNotMatch(out, /NotCapable|PermissionDenied|Requires .* access/);
});

test(
  "quickstart by URL with no permissions at all falls back to the CPU and says why",
  { skip, timeout: 120_000 },
  async () => {
    const { code, out } = await runDeno({ args: [] });
    assert.equal(code, 0, out);
    assert.match(out, /backend: cpu .*--allow-ffi/);
  },
);

test("NORMKIT_CUDA_LIB is read when --allow-env permits it", { skip, timeout: 120_000 }, async () => {
  const { code, out } = await runDeno({
    args: ["--allow-ffi", "--allow-env"],
    env: { NORMKIT_CUDA_LIB: "/nonexistent/libcuda-test.so" },
  });
  assert.equal(code, 0, out);
  assert.match(out, /backend: cpu .*\/nonexistent\/libcuda-test\.so/);
});

/** A user's script importing normkit by URL: an RMSNorm checked against the float64 CPU reference. */
const USER_SCRIPT = `import { cpuNormForward, Device, loadKernels, rmsNorm } from "{base}/mod.ts";
const rows = 16, d = 96, eps = 1e-6;
const xs = Float32Array.from({ length: rows * d }, (_, i) => Math.sin(i * 0.37) * 2 + 0.1);
const ws = Float32Array.from({ length: d }, (_, i) => 1 + Math.cos(i) / 4);
using dev = Device.open();
await loadKernels(dev);
using x = dev.tensor(xs, [rows, d]);
using w = dev.tensor(ws, [d]);
using y = rmsNorm(x, { weight: w, eps });
const out = await y.toArray();
const ref = cpuNormForward({ kind: "rms", rows, d, x: xs, xStride: d, weight: ws, eps });
let err = 0;
for (let i = 0; i < out.length; i++) err = Math.max(err, Math.abs(out[i] - ref.y[i]));
console.log(\`backend: \${dev.backend} elements: \${out.length} max abs error: \${err}\`);
`;

/** What the user's script printed: every element, within f32 rounding of |y| < 4 (CPU) or 1e-5 (GPU f32). */
function checkUserScript(out: string): void {
  const m = /backend: (\w+) elements: (\d+) max abs error: (\S+)/.exec(out);
  assert.ok(m, out);
  assert.equal(Number(m[2]), 16 * 96);
  assert.ok(Number(m[3]) <= 1e-5, out);
}

test(
  "a user's file importing mod.ts by URL runs with --allow-import=host and --allow-ffi",
  { skip, timeout: 120_000 },
  async () => {
    const { code, out } = await runDeno({ args: ["--allow-import={host}", "--allow-ffi"], script: USER_SCRIPT });
    assert.equal(code, 0, out);
    checkUserScript(out);
    assert.doesNotMatch(out, /NotCapable|PermissionDenied|Requires .* access/);
  },
);

test("a user's file importing mod.ts by URL without --allow-import is refused, naming the flag", {
  skip,
  timeout: 120_000,
}, async () => {
  const { code, out } = await runDeno({ args: ["--allow-ffi"], script: USER_SCRIPT });
  assert.notEqual(code, 0, out);
  assert.match(out, /--allow-import/);
});

test(".ts served as text/vnd.trolltech.linguist (python3 -m http.server) is refused by Deno", {
  skip,
  timeout: 120_000,
}, async () => {
  const { code, out } = await runDeno({
    args: ["--allow-import={host}", "--allow-ffi"],
    script: USER_SCRIPT,
    tsType: "text/vnd.trolltech.linguist",
  });
  assert.notEqual(code, 0, out);
  assert.match(out, /Expected a JavaScript or TypeScript module/);
});

/** A user's script reading the sm_90 image the way loadKernels does for a compute capability 9.0 device. */
const IMAGE_SCRIPT = `import { kernelImage } from "{base}/gpu.ts";
import { FAKE_H200 } from "{base}/tests/fixtures/fake_cuda.ts";
try {
  console.log(JSON.stringify({ bytes: (await kernelImage({ backend: "cuda", info: FAKE_H200 })).length }));
} catch (e) {
  console.log(JSON.stringify({ error: String(e) }));
}
`;

test("a GPU device's image by URL: fetched from the same host with --allow-net, refused without it", {
  skip,
  timeout: 120_000,
}, async () => {
  const size = readFileSync(join(root, "precompiled/norm_sm90.fatbin")).length;
  const granted = await runDeno({ args: ["--allow-import={host}", "--allow-net={host}"], script: IMAGE_SCRIPT });
  assert.equal(granted.code, 0, granted.out);
  assert.deepEqual(JSON.parse(granted.out.trim().split("\n").pop()!), { bytes: size }, granted.out);
  const denied = await runDeno({ args: ["--allow-import={host}"], script: IMAGE_SCRIPT });
  assert.equal(denied.code, 0, denied.out);
  assert.match(JSON.parse(denied.out.trim().split("\n").pop()!).error, /net access/, denied.out);
});

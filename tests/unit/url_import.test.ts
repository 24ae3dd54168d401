/**
 * The package imported by URL: served over HTTP from 127.0.0.1, the quickstart runs under Deno with no
 * permission beyond --allow-ffi on the CPU (no kernel image is read there; the environment is read only where
 * permitted); a GPU device's image is fetched from the same server, which needs --allow-net for it.
 * Also: NORMKIT_CUDA_LIB is honoured when --allow-env grants it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const denoBin = [join(root, "node_modules/.bin/deno"), "/usr/local/bin/deno"].find((p) => existsSync(p));
const skip = denoBin ? undefined : "no deno binary in node_modules/.bin or /usr/local/bin";

function serve(): Promise<{ server: Server; base: string }> {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname));
    const file = join(root, path);
    if (!file.startsWith(root + "/") || !existsSync(file) || path.includes("node_modules")) {
      res.writeHead(404).end();
      return;
    }
    // As web servers label them (the kernel images are binary: application/octet-stream).
    const type = file.endsWith(".ts") ? "application/typescript" : file.endsWith(".json") ? "application/json" : "application/octet-stream";
    res.writeHead(200, { "content-type": type }).end(readFileSync(file));
  });
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => {
    const a = server.address() as { port: number };
    ok({ server, base: `http://127.0.0.1:${a.port}` });
  }));
}

async function runDeno(
  args: string[],
  env: Record<string, string> = {},
  script = "examples/quickstart.ts",
): Promise<{ code: number; out: string }> {
  const { server, base } = await serve();
  const work = mkdtempSync(join(tmpdir(), "normkit-url-"));
  try {
    // Asynchronous spawn: a synchronous one would block the event loop that serves the files.
    const child = spawn(denoBin!, ["run", ...args, `${base}/${script}`], {
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
  const { code, out } = await runDeno(["--allow-ffi"]);
  assert.equal(code, 0, out);
  assert.match(out, /backend: (cuda|cpu)/);
  assert.match(out, /max abs error vs float64: [0-9.e+-]+/);
  assert.doesNotMatch(out, /NotCapable|PermissionDenied|Requires .* access/);
});

test("quickstart by URL with no permissions at all falls back to the CPU and says why", { skip, timeout: 120_000 }, async () => {
  const { code, out } = await runDeno([]);
  assert.equal(code, 0, out);
  assert.match(out, /backend: cpu .*--allow-ffi/);
});

test("NORMKIT_CUDA_LIB is read when --allow-env permits it", { skip, timeout: 120_000 }, async () => {
  const { code, out } = await runDeno(["--allow-ffi", "--allow-env"], { NORMKIT_CUDA_LIB: "/nonexistent/libcuda-test.so" });
  assert.equal(code, 0, out);
  assert.match(out, /backend: cpu .*\/nonexistent\/libcuda-test\.so/);
});


test("a GPU device's image by URL: fetched from the server with --allow-net, refused without it", { skip, timeout: 120_000 }, async () => {
  const size = readFileSync(join(root, "precompiled/norm_sm90.fatbin")).length;
  const granted = await runDeno(["--allow-net=127.0.0.1"], {}, "tests/fixtures/image_by_url.ts");
  assert.equal(granted.code, 0, granted.out);
  assert.deepEqual(JSON.parse(granted.out.trim().split("\n").pop()!), { bytes: size }, granted.out);
  const denied = await runDeno([], {}, "tests/fixtures/image_by_url.ts");
  assert.equal(denied.code, 0, denied.out);
  assert.match(JSON.parse(denied.out.trim().split("\n").pop()!).error, /net access/, denied.out);
});

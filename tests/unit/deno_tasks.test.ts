/**
 * `deno task` after `npm ci`: node_modules/.bin/deno then points at the native deno binary, and deno task
 * runs every node_modules/.bin entry named in a task as a JavaScript file (SyntaxError at
 * node_modules/deno/deno:1:1). The tasks in deno.json therefore call deno by the path `which` finds; these tests
 * run them as a user would.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const denoBin = join(root, "node_modules/.bin/deno");
const skip = existsSync(denoBin) ? undefined : "no node_modules/.bin/deno (npm ci)";

function task(args: string[]): { code: number; out: string } {
  const r = spawnSync(denoBin, ["task", ...args], {
    cwd: root,
    encoding: "utf8",
    timeout: 120_000,
    env: { ...process.env, NO_COLOR: "1" },
  });
  return { code: r.status ?? -1, out: `${r.stdout}${r.stderr}` };
}

const tasks = JSON.parse(readFileSync(join(root, "deno.json"), "utf8")).tasks as Record<string, string>;

test("every deno.json task that runs deno calls it by path", () => {
  const bare = Object.entries(tasks).filter(([, cmd]) => /(^|[;&|]\s*)deno\s/.test(cmd));
  assert.deepEqual(bare, [], 'use "$(which deno)" rather than a bare deno');
});

test("deno task demo runs the quickstart", { skip, timeout: 120_000 }, () => {
  const { code, out } = task(["demo"]);
  assert.equal(code, 0, out);
  assert.match(out, /max abs error vs float64: [0-9.e+-]+/);
});

test("deno task test reaches deno test (its help, not the suite)", { skip, timeout: 60_000 }, () => {
  const { code, out } = task(["test", "--help"]);
  assert.equal(code, 0, out);
  assert.match(out, /Run tests/);
});

test("deno task bench reaches bench/bench.ts", { skip, timeout: 60_000 }, () => {
  // Running the benchmark is not a unit test: its command line is checked through deno task's own expansion.
  assert.match(tasks.bench ?? "", /^"\$\(which deno\)" run .*bench\/bench\.ts$/);
  const { code, out } = task(["--eval", '"$(which deno)" --version']);
  assert.equal(code, 0, out);
  assert.match(out, /^deno \d+\.\d+\.\d+/m);
});

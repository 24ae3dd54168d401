/**
 * Bad input, counted: every row of tests/fixtures/bad_input_cases.ts is refused with its error class, the message
 * names its argument, and nothing changed (tensors, module parameters, what the devices own, launches). The page
 * docs/bad-input.md is generated from the same rows and must be current.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { ArgumentError } from "../../mod.ts";
import {
  BAD_INPUT_CASES,
  type BadInputCase,
  badInputPage,
  type CaseOutcome,
  runCase,
} from "../fixtures/bad_input_cases.ts";

// What each row got, for the page check at the end (rows not run here, e.g. under a name filter, run again there).
const outcomes = new Map<BadInputCase, CaseOutcome>();

for (const [i, row] of BAD_INPUT_CASES.entries()) {
  test(`bad input ${i + 1}: ${row.fn} with ${row.input} → ${row.error.name} naming ${row.argument}`, async () => {
    const outcome = await runCase(row);
    outcomes.set(row, outcome);
    const { error, stateChanged } = outcome;
    assert.ok(error !== undefined, "refused");
    assert.ok(error instanceof row.error, `${row.error.name} expected, got ${error}`);
    if (error instanceof ArgumentError) assert.equal(error.argument, row.argument, error.message);
    assert.ok((error as Error).message.includes(row.argument), `"${(error as Error).message}" names ${row.argument}`);
    assert.equal(stateChanged, false, "a refused call changes nothing");
  });
}

test("bad input: at least 100 kinds, covering every public function that takes input", () => {
  assert.ok(BAD_INPUT_CASES.length >= 100, `${BAD_INPUT_CASES.length} kinds`);
  const kinds = new Set(BAD_INPUT_CASES.map((r) => `${r.fn}: ${r.input}`));
  assert.equal(kinds.size, BAD_INPUT_CASES.length, "each kind once");
  const fns = new Set(BAD_INPUT_CASES.map((r) => r.fn));
  for (
    const fn of [
      "layerNorm",
      "rmsNorm",
      "layerNormBackward",
      "rmsNormBackward",
      "new LayerNorm",
      "new RMSNorm",
      "Module.load",
      "Module.forward",
      "Module.backward",
      "Module.zeroGrad",
      "Device.open",
      "dev.tensor",
      "dev.empty",
      "dev.alloc",
      "dev.pinned",
      "Tensor.write",
      "Tensor.readSync",
      "Tensor.toArray",
      "new Tensor",
      "dev.createStream",
      "dev.createEvent",
      "dev.loadModule",
      "Module.kernel",
      "launch",
      "new LaunchConfig",
    ]
  ) assert.ok(fns.has(fn), `${fn} has rows`);
  // Every option of the norms and the backwards given a value of the wrong type.
  const inputs = (fn: string) => BAD_INPUT_CASES.filter((r) => r.fn === fn).map((r) => r.input.split(":")[0]);
  for (
    const [fn, options] of [
      ["layerNorm", ["options", "weight", "bias", "eps", "out", "outDtype", "stream", "stats", "check"]],
      ["rmsNorm", ["options", "weight", "bias", "eps", "out", "outDtype", "stream", "stats", "check"]],
      ["layerNormBackward", [
        "options",
        "dy",
        "x",
        "mean",
        "rstd",
        "weight",
        "dx",
        "dweight",
        "dbias",
        "accumulate",
        "stream",
      ]],
      ["new LayerNorm", ["device", "d", "options", "eps", "weight", "bias", "zeroCentered"]],
      ["dev.tensor", ["values", "shape", "options", "dtype", "rowStride", "stream"]],
    ] as const
  ) {
    for (const o of options) assert.ok(inputs(fn).includes(o), `${fn}: a row for ${o}`);
  }
});

/**
 * The page's data: its count line and table rows, cells trimmed (deno fmt pads the cells and reflows the prose; the
 * content is what must not drift).
 */
function pageData(page: string): string[] {
  return page.split("\n").filter((l) => l.startsWith("|") || /^\d+ kinds/.test(l))
    .map((l) => l.replace(/\s*\|\s*/g, "|").replace(/\|-+(?=\|)/g, "|-"));
}

test("docs/bad-input.md is the page the rows generate (deno run -A scripts/bad-input-table.ts rewrites it)", {
  timeout: 120_000,
}, async () => {
  const page = readFileSync(new URL("../../docs/bad-input.md", import.meta.url), "utf8");
  assert.deepEqual(
    pageData(page),
    pageData(await badInputPage(outcomes)),
    "docs/bad-input.md is stale: run deno run -A scripts/bad-input-table.ts",
  );
});

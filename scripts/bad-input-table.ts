/**
 * Writes docs/bad-input.md from tests/fixtures/bad_input_cases.ts: each kind of bad input, its error class and its
 * message as the code gives it now. `deno run -A scripts/bad-input-table.ts` (or `bun scripts/bad-input-table.ts`);
 * tests/unit/bad_input.test.ts fails when the page is stale.
 */
import { writeFileSync } from "node:fs";
import { BAD_INPUT_CASES, badInputPage } from "../tests/fixtures/bad_input_cases.ts";

const path = new URL("../docs/bad-input.md", import.meta.url);
writeFileSync(path, await badInputPage());
console.log(`docs/bad-input.md: ${BAD_INPUT_CASES.length} kinds of bad input`);

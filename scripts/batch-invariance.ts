/**
 * Writes the audit's tables into docs/batch-invariance.md (between its markers; the rest of the page is kept):
 * where the tuned forward plan sums a row in another order as the row count changes, on the H200's limits.
 * `deno run -A scripts/batch-invariance.ts` (or `bun scripts/batch-invariance.ts`), then `deno fmt` the page; `--check`
 * exits 1 when the page is stale instead (formatting aside).
 */
import process from "node:process";
import { readFileSync, writeFileSync } from "node:fs";
import { auditSection, sameUpToFormat, withAuditSection } from "./batch_invariance_audit.ts";

const path = new URL("../docs/batch-invariance.md", import.meta.url);
const page = readFileSync(path, "utf8");
const next = withAuditSection(page, auditSection());
if (process.argv.includes("--check")) {
  if (!sameUpToFormat(next, page)) {
    console.error("docs/batch-invariance.md is stale: run scripts/batch-invariance.ts");
    process.exit(1);
  }
  console.log("docs/batch-invariance.md: up to date");
} else {
  writeFileSync(path, next);
  console.log("docs/batch-invariance.md: audit tables written");
}

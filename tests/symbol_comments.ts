/** Shared by the symbol-table ABI tests: the `//` comment block above a table entry. */
import assert from "node:assert/strict";

/** The comment block directly above `name`'s entry in `source` (a symbol table file), without the `//`. */
export function commentAbove(source: string, name: string, file: string): string {
  const lines = source.split("\n");
  const at = lines.findIndex((l) => new RegExp(`^\\s*${name}\\s*:\\s*\\{`).test(l));
  assert.ok(at > 0, `${name}: entry not found in ${file}`);
  const block: string[] = [];
  for (let i = at - 1; i >= 0 && /^\s*\/\//.test(lines[i]); i--) block.unshift(lines[i].replace(/^\s*\/\/\s?/, ""));
  return block.join("\n");
}

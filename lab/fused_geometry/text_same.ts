/**
 * Is a kernel's machine code the same in two builds of a SASS image? Compares the `.text.<kernel>` sections of the
 * kernels both images define, byte for byte, and lists the kernels only one of them has.
 *
 *   deno run -A lab/fused_geometry/text_same.ts A.fatbin B.fatbin     # e.g. precompiled/fused_sm90.fatbin of two commits
 *
 * Exit status 0 when every kernel of A is in B with the same bytes.
 */
import process from "node:process";
import { readFileSync } from "node:fs";
import { kernelTexts, sassElf } from "../../tests/fixtures/fatbin.ts";

const [a, b] = process.argv.slice(2);
if (!a || !b) {
  console.error("usage: lab/fused_geometry/text_same.ts A.fatbin B.fatbin");
  process.exit(2);
}
const texts = (p: string) => kernelTexts(sassElf(new Uint8Array(readFileSync(p))));
const ta = texts(a), tb = texts(b);
const same: string[] = [], differ: string[] = [];
for (const [name, bytes] of ta) {
  const other = tb.get(name);
  if (other && other.length === bytes.length && other.every((x, i) => x === bytes[i])) same.push(name);
  else differ.push(name);
}
const onlyB = [...tb.keys()].filter((k) => !ta.has(k));
console.log(`${a}: ${ta.size} kernels; ${b}: ${tb.size}`);
console.log(`same bytes in both: ${same.length}`);
console.log(`in ${a}, not the same in ${b}: ${differ.length}${differ.length ? ": " + differ.join(", ") : ""}`);
console.log(`only in ${b}: ${onlyB.length}${onlyB.length ? ": " + onlyB.join(", ") : ""}`);
process.exit(differ.length ? 1 : 0);

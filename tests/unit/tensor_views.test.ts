/**
 * Tensor views with a stride per leading dimension (Tensor.view, `strides`): the rows they describe, reads and
 * writes through them against the same elements of the base tensor, and the views refused.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { ArgumentError, Device, Tensor, UnsupportedError } from "../../mod.ts";
import { levelsOf } from "../../runtime/tensor.ts";
import { randoms } from "../fixtures/random.ts";

const tokens = 3, hq = 4, hkv = 2, hd = 8, width = (hq + 2 * hkv) * hd;

/** The element index in the base [tokens, width] of (token, head, i) for heads starting at column `first`. */
const at = (t: number, h: number, i: number, first: number) => t * width + first + h * hd + i;

test("view of the query heads of a fused QKV buffer: two row levels, reads the right elements", () => {
  using dev = Device.open({ backend: "cpu" });
  const values = randoms(tokens * width, 7);
  using qkv = dev.tensor(values, [tokens, width]);
  const q = qkv.view([tokens, hq, hd], { strides: [width, hd, 1] });
  assert.deepEqual(q.levels, { n0: tokens, s0: width, n1: hq, s1: hd });
  assert.equal(q.uniformRows, false);
  assert.equal(q.contiguous, false);
  assert.deepEqual(q.strides, [width, hd, 1]);
  assert.equal(q.rows, tokens * hq);
  assert.throws(() => q.rowStride, UnsupportedError);
  const got = q.readSync();
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < hq; h++) {
      for (let i = 0; i < hd; i++) assert.equal(got[(t * hq + h) * hd + i], Math.fround(values[at(t, h, i, 0)]));
    }
  }
  assert.match(String(q), /strides \[64, 8, 1\]/);
});

test("writing through a view of the key heads changes those elements only", () => {
  using dev = Device.open({ backend: "cpu" });
  const values = randoms(tokens * width, 8);
  using qkv = dev.tensor(values, [tokens, width], { dtype: "bf16" });
  const before = qkv.readSync();
  const k = qkv.view([tokens, hkv, hd], { strides: [width, hd, 1], offset: hq * hd });
  const fresh = randoms(tokens * hkv * hd, 9);
  k.write(fresh);
  const after = qkv.readSync(), kGot = k.readSync();
  const touched = new Set<number>();
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < hkv; h++) {
      for (let i = 0; i < hd; i++) {
        const e = at(t, h, i, hq * hd), v = fresh[(t * hkv + h) * hd + i];
        touched.add(e);
        assert.equal(after[e], kGot[(t * hkv + h) * hd + i]);
        assert.ok(Math.abs(after[e] - v) <= Math.abs(v) * 2 ** -8, `element ${e}`);
      }
    }
  }
  for (let e = 0; e < after.length; e++) if (!touched.has(e)) assert.equal(after[e], before[e], `element ${e}`);
});

test("levels: size-1 dimensions dropped, neighbours merged, one level kept as a row stride", () => {
  assert.deepEqual(levelsOf([2, 3, 4], [12, 4, 1]), { n0: 1, s0: 0, n1: 6, s1: 4 });
  assert.deepEqual(levelsOf([2, 1, 3, 4], [40, 99, 5, 1]), { n0: 2, s0: 40, n1: 3, s1: 5 });
  assert.deepEqual(levelsOf([5, 4], [7, 1]), { n0: 1, s0: 0, n1: 5, s1: 7 });
  using dev = Device.open({ backend: "cpu" });
  using base = dev.tensor(randoms(64, 1), [8, 8]);
  const v = base.view([2, 2, 8], { strides: [32, 16, 1] }); // rows 0, 2, 4, 6: one stride of 16
  assert.equal(v.uniformRows, true);
  assert.equal(v.rowStride, 16);
  assert.deepEqual(Array.from(v.readSync()), Array.from(base.readSync()).filter((_, i) => (i >> 3) % 2 === 0));
  const whole = base.view([64]);
  assert.equal(whole.contiguous, true);
  assert.equal(whole.rows, 1);
});

test("transposed levels: [tokens, heads, hd] over a head-major buffer reads and writes in token order", () => {
  const tokens = 3, heads = 4, hd = 8;
  assert.deepEqual(levelsOf([tokens, heads, hd], [hd, tokens * hd, 1]), { n0: 3, s0: 8, n1: 4, s1: 24 });
  // Disjoint rows whose outer level steps inside the inner one: interleaved by row, not by element.
  assert.deepEqual(levelsOf([2, 3, 4], [4, 8, 1]), { n0: 2, s0: 4, n1: 3, s1: 8 });
  using dev = Device.open({ backend: "cpu" });
  const values = randoms(heads * tokens * hd, 11);
  using cache = dev.tensor(values, [heads, tokens, hd]);
  const v = cache.view([tokens, heads, hd], { strides: [hd, tokens * hd, 1] });
  assert.equal(v.uniformRows, false);
  assert.deepEqual(v.strides, [hd, tokens * hd, 1]);
  const got = v.readSync();
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < hd; i++) {
        assert.equal(got[(t * heads + h) * hd + i], values[(h * tokens + t) * hd + i], `[${t}, ${h}, ${i}]`);
      }
    }
  }
  const fresh = randoms(tokens * heads * hd, 12);
  v.write(fresh);
  const after = cache.readSync();
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < hd; i++) assert.equal(after[(h * tokens + t) * hd + i], fresh[(t * heads + h) * hd + i]);
    }
  }
  // Rows that neither nest nor transpose (the outer stride inside a row) may overlap: refused.
  assert.throws(
    () => cache.view([2, 2, 8], { strides: [4, 24, 1] }),
    (e: unknown) => e instanceof ArgumentError && e.argument === "strides",
  );
});

test("views refused: overlapping rows, a strided last dimension, three levels, past the memory, bad options", () => {
  using dev = Device.open({ backend: "cpu" });
  using base = dev.tensor(randoms(240, 2), [240]);
  const arg = (name: string) => (e: unknown) => e instanceof ArgumentError && e.argument === name;
  assert.throws(() => base.view([4, 8], { strides: [4, 1] }), arg("strides"));
  assert.throws(() => base.view([2, 4, 8], { strides: [20, 8, 1] }), arg("strides"));
  assert.throws(() => base.view([4, 8], { strides: [8, 2] }), arg("strides[1]"));
  assert.throws(() => base.view([4, 8], { strides: [8] }), arg("strides"));
  assert.throws(() => base.view([4, 8], { strides: [-8, 1] }), arg("strides[0]"));
  assert.throws(() => base.view([2, 2, 2, 4], { strides: [100, 40, 10, 1] }), UnsupportedError);
  assert.throws(() => base.view([4, 64], { strides: [64, 1] }), arg("buffer"));
  assert.throws(() => base.view([4, 8], { offset: 220 }), arg("buffer"));
  assert.throws(() => base.view([4, 8], { offset: -1 }), arg("offset"));
  assert.throws(() => base.view([4, 8], null as never), arg("options"));
  assert.throws(
    () => new Tensor(base.buffer, [4, 8], { strides: [8, 1], rowStride: 8 }),
    arg("strides"),
  );
  base.close();
  assert.throws(() => base.view([4]), (e: unknown) => e instanceof Error && e.name === "DisposedError");
});

test("a padded tensor's gaps are zeroed at allocation: reading the span never copies undefined bytes", () => {
  using dev = Device.open({ backend: "cpu" });
  using t = dev.empty([3, 5], { rowStride: 8 });
  assert.deepEqual(
    Array.from(new Float32Array(t.buffer.hostBytes.buffer, t.buffer.hostBytes.byteOffset, 21)).filter((_, i) =>
      i % 8 >= 5
    ),
    new Array(6).fill(0),
  );
});

/**
 * The benchmarks' device timer (bench/bench.ts, lab/kernel_ab/fwd_ab.ts): before each timed call the stream gets a
 * 256 MiB memset (~0.1 ms of device work, as triton's do_bench clears a cache buffer). The device is still busy
 * with it while the host queues the start event and the call, so the interval holds only device time (not the
 * host's validation and launch), and L2 holds nothing useful.
 */
import type { Device } from "../mod.ts";
import type { Stream } from "../gpu.ts";

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1];
}

/**
 * A timer over `dev.stream`: `time(fn)` is the median ms of `reps` timed calls after WARM_UPS untimed ones, which let
 * the runtime compile the call's JavaScript: cold, a path's host code can outlast the memset queued before each timed
 * call, and its wait then counts as device time.
 */
const WARM_UPS = 20;
export function deviceTimer(dev: Device, reps: number): { time(fn: () => void): number } & Disposable {
  const busy = dev.alloc(256 * 2 ** 20);
  return {
    time(fn: () => void): number {
      for (let i = 0; i < WARM_UPS; i++) fn();
      const times: number[] = [];
      using a = dev.createEvent(), b = dev.createEvent();
      for (let i = 0; i < reps; i++) {
        busy.fill(i & 0xff);
        a.record();
        fn();
        b.record();
        b.synchronize();
        times.push(b.elapsedSince(a));
      }
      return median(times);
    },
    [Symbol.dispose]: () => busy[Symbol.dispose](),
  };
}

/** The ceiling: a 1 GiB device-to-device copy timed with `timer` (after a second of copies), in GB/s read + written. */
export function copyCeilingGBs(dev: Device, timer: { time(fn: () => void): number }): number {
  using src = dev.alloc(2 ** 30), dst = dev.alloc(2 ** 30);
  src.fill(7);
  // About a second of copies first, so that neither the ceiling nor the run's first case is timed while the clocks
  // are still leaving their idle state.
  const t0 = performance.now();
  do {
    for (let i = 0; i < 20; i++) dst.copyFrom(src);
    dev.synchronize();
  } while (performance.now() - t0 < 1000);
  return (2 * 2 ** 30) / (timer.time(() => dst.copyFrom(src)) * 1e6);
}

/**
 * Device µs per op of `op` captured `ops` times in a CUDA graph on a fresh stream, over `replays` replays (after 20
 * eager warm-up calls and one warm-up replay).
 */
export function graphUs(dev: Device, op: (s: Stream) => void, ops = 100, replays = 200): number {
  using stream = dev.createStream();
  for (let i = 0; i < 20; i++) op(stream);
  stream.synchronize();
  using graph = stream.capture(() => {
    for (let i = 0; i < ops; i++) op(stream);
  });
  using exec = graph.instantiate();
  exec.launch(stream);
  stream.synchronize();
  using start = dev.createEvent(), end = dev.createEvent();
  start.record(stream);
  for (let i = 0; i < replays; i++) exec.launch(stream);
  end.record(stream);
  end.synchronize();
  return (end.elapsedSince(start) * 1000) / (replays * ops);
}

"""What bench/compare_torch.py and bench/compare_torch_bwd.py share: timing like bench/bench.ts (CUDA events,
median of `reps` after 3 warm-ups, each call queued behind a 256 MiB memset), the device-to-device copy ceiling of the same run, and torch.compile
settings that let one compiled function serve every shape of the grid."""
import statistics
import torch


_busy = None


def time_ms(fn, reps):
    """As bench/bench.ts: a 256 MiB memset queued before each timed call keeps the device busy while the start
    event and the call are queued (the interval holds device time only, not Python's dispatch) and clears L2."""
    global _busy
    if _busy is None:
        _busy = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for i in range(reps):
        _busy.fill_(i & 0xFF)
        s.record(); fn(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def copy_gbs(dev, reps):
    """1 GiB device-to-device copy, bytes read + written per second (GB/s)."""
    src = torch.empty(2**30, dtype=torch.uint8, device=dev).fill_(7)
    dst = torch.empty_like(src)
    gbs = 2 * 2**30 / (time_ms(lambda: dst.copy_(src), reps) * 1e6)
    del src, dst
    return gbs


def lift_recompile_limits():
    """Dynamo's recompile limit (default 8) would silently send later shapes to eager."""
    import torch._dynamo
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 4096)

"""torch eager and torch.compile on bench/fused.ts's cases, timed the same way (torch_common.py: CUDA events, median of
REPS, a 256 MiB memset before each call; the copy ceiling of the same run; decode cases captured GRAPH_OPS times in a
CUDA graph, device µs per op of a replay). Writes JSON (--json PATH).

- add: h = x + residual (rounded to the dtype), y = norm(h) (F.rms_norm / F.layer_norm), optionally quantized per row
  (dynamic: scale = max(amax / qmax, 1 / (qmax * 512)), q = y / scale saturated to the format); bytes as fused.ts.
- decode: add + RMSNorm + fp8e4m3, 1-8 rows, D 2048-8192, residual updated in place.
- qk: F.rms_norm on the Q and K head views of a fused QKV buffer [tokens, (Hq + 2 Hkv) * 128] (what Qwen3 runs:
  two calls, each writing a new tensor); decode (graph µs per op) and prefill (GB/s, bytes = heads read + written).

    python3 bench/compare_torch_fused.py [--quick] [--only add,decode,qk] [--json out.json] [--no-compile]
"""
import argparse, json, datetime
import torch
import torch.nn.functional as F
import torch_common as tc  # bench/torch_common.py (python puts the script's folder on sys.path)

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--json")
ap.add_argument("--no-compile", action="store_true")
ap.add_argument("--only", default="add,decode,qk", help="comma-separated parts: add, decode, qk")
a = ap.parse_args()
ONLY = set(a.only.split(","))
if not ONLY or ONLY - {"add", "decode", "qk"}:
    ap.error(f"--only takes a comma-separated list of add, decode, qk; got {a.only}")

DS = [1024, 4096] if a.quick else [512, 1024, 2048, 4096, 5120, 8192]
DT = {"bf16": torch.bfloat16, "f16": torch.float16}
QUANTS = [None, "fp8e4m3", "int8"]
QT = {"fp8e4m3": (torch.float8_e4m3fn, 448.0), "int8": (torch.int8, 127.0)}
DECODE_ROWS, DECODE_DS = [1, 2, 4, 8], [2048, 4096, 8192]
HQ, HKV, HEAD, QK_DECODE, QK_PREFILL = 32, 8, 128, [1, 8], 16384
MIN_BYTES, REPS, GRAPH_OPS, REPLAYS = 2**30, 10 if a.quick else 30, 100, 200
dev = torch.device("cuda")


def quantize(y, q):
    """Per-row dynamic quantization as normkit's (f32): the scale floor 1 / (qmax * 512), saturating conversion."""
    dt, qmax = QT[q]
    yf = y.float()
    scale = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / qmax, min=1.0 / (qmax * 512))
    v = (yf / scale).clamp(-qmax, qmax)
    return (v.round() if q == "int8" else v).to(dt), scale


def add_norm(kind, q):
    def f(x, r, w, b, d):
        h = x + r
        y = F.rms_norm(h, (d,), w, 1e-6) if kind == "rms" else F.layer_norm(h, (d,), w, b, 1e-5)
        return (h, *quantize(y, q)) if q else (h, y)
    return f


def graph_us(fn):
    """Device µs per op of fn captured GRAPH_OPS times in a CUDA graph (after warm-up on a side stream)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(5):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(GRAPH_OPS):
            fn()
    g.replay()
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    for _ in range(REPLAYS):
        g.replay()
    en.record()
    en.synchronize()
    return st.elapsed_time(en) * 1e3 / (REPLAYS * GRAPH_OPS)


def both(row, prefix, eager, comp, time):
    """Times eager and (unless --no-compile) compiled; a compile failure is reported in the row, not hidden."""
    row[f"eager_{prefix}"] = time(eager)
    if not a.no_compile:
        try:
            row[f"compile_{prefix}"] = time(comp)
        except Exception as ex:
            row["compile_error"] = str(ex)[:200]


copy_gbs = tc.copy_gbs(dev, REPS)
print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}, copy {copy_gbs:.0f} GB/s")
tc.lift_recompile_limits()
results = []
ADD = {(k, q): add_norm(k, q) for k in ("rms", "layer") for q in QUANTS}
ADD_C = {key: torch.compile(f, dynamic=False) for key, f in ADD.items()}

for d in DS if "add" in ONLY else []:
    for name, dt in DT.items():
        for q in QUANTS:
            b, yb = 2, 1 if q else 2
            per_row = d * (3 * b + yb) + (4 if q else 0)
            rows = -(-MIN_BYTES // per_row)
            x = (torch.rand(rows, d, device=dev) * 4 - 2).to(dt)
            r = (torch.rand(rows, d, device=dev) * 4 - 2).to(dt)
            w = (1 + torch.rand(d, device=dev) / 8).to(dt)
            bias = torch.rand(d, device=dev).to(dt)
            for kind in ("rms", "layer"):
                f, fc = ADD[(kind, q)], ADD_C[(kind, q)]
                nbytes = rows * per_row + d * b * (2 if kind == "layer" else 1)
                row = {"case": "add", "kind": kind, "dtype": name, "quant": q, "d": d, "rows": rows}
                both(row, "us", lambda: f(x, r, w, bias, d), lambda: fc(x, r, w, bias, d),
                     lambda fn: tc.time_ms(fn, REPS) * 1e3)
                for k in ("eager", "compile"):
                    if f"{k}_us" in row:
                        row[f"{k}_gbs"] = nbytes / (row[f"{k}_us"] * 1e3)
                results.append(row)
                print(f"add {kind:5} {name:5} {q or '-':8} {d:6} {rows:8} eager {row['eager_gbs']:6.0f} GB/s"
                      f"  compile {row.get('compile_gbs', float('nan')):6.0f} GB/s", flush=True)
            del x, r, w, bias
            torch.cuda.empty_cache()


def decode_step(x, res, w, d):
    res.add_(x)  # the residual stream, updated in place
    return quantize(F.rms_norm(res, (d,), w, 1e-6), "fp8e4m3")


decode_c = torch.compile(decode_step, dynamic=False)
for d in DECODE_DS if "decode" in ONLY else []:
    for rows in DECODE_ROWS:
        x = (torch.rand(rows, d, device=dev) * 4 - 2).to(torch.bfloat16)
        res = (torch.rand(rows, d, device=dev) * 4 - 2).to(torch.bfloat16)
        w = (1 + torch.rand(d, device=dev) / 8).to(torch.bfloat16)

        row = {"case": "decode", "kind": "rms", "dtype": "bf16", "quant": "fp8e4m3", "d": d, "rows": rows}
        both(row, "graph_us", lambda: decode_step(x, res, w, d), lambda: decode_c(x, res, w, d), graph_us)
        results.append(row)
        print(f"decode D={d} rows={rows}: eager {row['eager_graph_us']:.2f} compile "
              f"{row.get('compile_graph_us', float('nan')):.2f} µs/op (graph)", flush=True)


def qk_norm(qkv, qw, kw, tokens):
    q = qkv[:, : HQ * HEAD].view(tokens, HQ, HEAD)
    k = qkv[:, HQ * HEAD : (HQ + HKV) * HEAD].view(tokens, HKV, HEAD)
    return F.rms_norm(q, (HEAD,), qw, 1e-6), F.rms_norm(k, (HEAD,), kw, 1e-6)


qk_c = torch.compile(qk_norm, dynamic=False)
width = (HQ + 2 * HKV) * HEAD
for tokens in QK_DECODE + [QK_PREFILL] if "qk" in ONLY else []:
    qkv = (torch.rand(tokens, width, device=dev) * 4 - 2).to(torch.bfloat16)
    qw = (1 + torch.rand(HEAD, device=dev) / 8).to(torch.bfloat16)
    kw = (1 + torch.rand(HEAD, device=dev) / 8).to(torch.bfloat16)

    eager, comp = lambda: qk_norm(qkv, qw, kw, tokens), lambda: qk_c(qkv, qw, kw, tokens)
    row = {"case": "qk", "dtype": "bf16", "tokens": tokens, "hq": HQ, "hkv": HKV, "headDim": HEAD}
    if tokens == QK_PREFILL:
        nbytes = 2 * tokens * (HQ + HKV) * HEAD * 2 + 2 * HEAD * 2
        both(row, "us", eager, comp, lambda fn: tc.time_ms(fn, REPS) * 1e3)
        for k in ("eager", "compile"):
            if f"{k}_us" in row:
                row[f"{k}_gbs"] = nbytes / (row[f"{k}_us"] * 1e3)
    else:
        both(row, "graph_us", eager, comp, graph_us)
    results.append(row)
    print(f"qk tokens={tokens}: {row}", flush=True)

if a.json:
    with open(a.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "date": datetime.datetime.utcnow().isoformat(), "copyGBs": copy_gbs, "results": results}, f, indent=1)

"""torch eager and torch.compile backward of F.layer_norm / F.rms_norm on the bench grid, timed like
`bench/bench.ts --backward`: CUDA events, median of REPS after warm-up, x + dy + dx = 1 GiB per case,
GB/s = 3*N*D*bytes + statistics + parameters. The timed call is torch.autograd.grad(y, (x, w[, b]), dy)
on a graph built once (retain_graph): the backward kernels only. For torch.compile the forward is the
compiled function, so AOTAutograd's compiled backward runs. Copy bandwidth measured in the same run.

    python3 bench/compare_torch_bwd.py [--quick | --ds 32768,65536] [--json out.json] [--no-compile]
"""
import argparse, json, datetime
import torch
import torch.nn.functional as F
import torch_common as tc  # bench/torch_common.py (python puts the script's folder on sys.path)

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--json")
ap.add_argument("--no-compile", action="store_true")
ap.add_argument("--ds", help="comma-separated hidden sizes instead of the grid's")
a = ap.parse_args()

DS = [int(v) for v in a.ds.split(",")] if a.ds else [1024, 4096, 32768] if a.quick else [128, 512, 768, 1024, 2048, 4096, 5120, 8192, 12288, 16384, 32768, 65536, 131072]
DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
MIN_BYTES = 2**30
REPS = 10 if a.quick else 20
dev = torch.device("cuda")


copy_gbs = tc.copy_gbs(dev, REPS)
print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}, copy {copy_gbs:.0f} GB/s (backward)")
tc.lift_recompile_limits()
ln_c = torch.compile(lambda x, w, b, d: F.layer_norm(x, (d,), w, b, 1e-5), dynamic=False)
rms_c = torch.compile(lambda x, w, d: F.rms_norm(x, (d,), w, 1e-6), dynamic=False)
results = []
for d in DS:
    for name, dt in DT.items():
        b = torch.finfo(dt).bits // 8
        rows = -(-MIN_BYTES // (3 * d * b))
        x = (torch.rand(rows, d, device=dev, dtype=torch.float32) * 4 - 2).to(dt).requires_grad_()
        dy = (torch.rand(rows, d, device=dev, dtype=torch.float32) * 2 - 1).to(dt)
        w = (1 + torch.rand(d, device=dev, dtype=torch.float32) / 8).to(dt).requires_grad_()
        bias = torch.rand(d, device=dev, dtype=torch.float32).to(dt).requires_grad_()
        for kind in ("layer", "rms"):
            nbytes = 3 * rows * d * b + rows * 4 * (2 if kind == "layer" else 1) + d * b * (3 if kind == "layer" else 2)
            row = {"kind": kind, "dtype": name, "d": d, "rows": rows}
            for label, fwd in (("eager", None), ("compile", True)):
                if fwd and a.no_compile:
                    continue
                try:
                    if kind == "layer":
                        y = ln_c(x, w, bias, d) if fwd else F.layer_norm(x, (d,), w, bias, 1e-5)
                        ins = (x, w, bias)
                    else:
                        y = rms_c(x, w, d) if fwd else F.rms_norm(x, (d,), w, 1e-6)
                        ins = (x, w)
                    ms = tc.time_ms(lambda: torch.autograd.grad(y, ins, dy, retain_graph=True), REPS)
                    row[f"{label}_us"], row[f"{label}_gbs"] = ms * 1e3, nbytes / (ms * 1e6)
                    del y
                except Exception as ex:  # report, don't hide
                    row[f"{label}_error"] = str(ex)[:200]
            results.append(row)
            print(f"{kind:5} {name:5} {d:7} {rows:8} eager {row.get('eager_gbs', float('nan')):7.0f} GB/s  compile {row.get('compile_gbs', float('nan')):7.0f} GB/s", flush=True)
        del x, dy, w, bias
        torch.cuda.empty_cache()

if a.json:
    with open(a.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "pass": "backward",
                   "date": datetime.datetime.utcnow().isoformat(), "copyGBs": copy_gbs, "results": results}, f, indent=1)

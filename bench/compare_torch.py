"""torch eager and torch.compile F.layer_norm / F.rms_norm on the bench grid, timed like bench/bench.ts:
CUDA events, median of REPS after warm-up, every case moves 1 GiB, GB/s = 2*N*D*bytes (+ params).
Also the device-to-device copy bandwidth in the same run. Writes JSON (--json PATH).

    python3 bench/compare_torch.py [--quick | --ds 32768,65536] [--json out.json] [--no-compile]
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
MIN_BYTES = 2**30  # as bench/bench.ts: 1 GiB moved per case
REPS = 10 if a.quick else 30
dev = torch.device("cuda")


copy_gbs = tc.copy_gbs(dev, REPS)
print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}, copy {copy_gbs:.0f} GB/s")
tc.lift_recompile_limits()
ln_c = torch.compile(lambda x, w, b, d: F.layer_norm(x, (d,), w, b, 1e-5), dynamic=False)
rms_c = torch.compile(lambda x, w, d: F.rms_norm(x, (d,), w, 1e-6), dynamic=False)
results = []
for d in DS:
    for name, dt in DT.items():
        b = torch.finfo(dt).bits // 8
        rows = -(-MIN_BYTES // (2 * d * b))
        x = (torch.rand(rows, d, device=dev, dtype=torch.float32) * 4 - 2).to(dt)
        w = (1 + torch.rand(d, device=dev, dtype=torch.float32) / 8).to(dt)
        bias = torch.rand(d, device=dev, dtype=torch.float32).to(dt)
        for kind in ("layer", "rms"):
            par = d * b * (2 if kind == "layer" else 1)
            nbytes = 2 * rows * d * b + par
            row = {"kind": kind, "dtype": name, "d": d, "rows": rows}
            if kind == "layer":
                eager = lambda: F.layer_norm(x, (d,), w, bias, 1e-5)
                comp = lambda: ln_c(x, w, bias, d)
            else:
                eager = lambda: F.rms_norm(x, (d,), w, 1e-6)
                comp = lambda: rms_c(x, w, d)
            ms = tc.time_ms(eager, REPS)
            row["eager_us"], row["eager_gbs"] = ms * 1e3, nbytes / (ms * 1e6)
            if not a.no_compile:
                try:
                    ms = tc.time_ms(comp, REPS)
                    row["compile_us"], row["compile_gbs"] = ms * 1e3, nbytes / (ms * 1e6)
                except Exception as ex:  # report, don't hide
                    row["compile_error"] = str(ex)[:200]
            results.append(row)
            print(f"{kind:5} {name:5} {d:7} {rows:8} eager {row['eager_gbs']:7.0f} GB/s  compile {row.get('compile_gbs', float('nan')):7.0f} GB/s", flush=True)
        del x, w, bias
        torch.cuda.empty_cache()

if a.json:
    with open(a.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "date": datetime.datetime.utcnow().isoformat(),
                   "copyGBs": copy_gbs, "results": results}, f, indent=1)

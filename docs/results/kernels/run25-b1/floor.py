"""The floor of one timed launch at batch 1 as the benches time it: CUDA events around the op, after a write of
2x the L2 (as runtime.bench.Timer does). A one-float fill, fills of the 64->64 @56 / 512->512 @7 outputs (the
memset a tc < C kernel pays) and the two back to back. Median of 50."""
import json
import statistics
import sys

import torch

flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4, device="cuda")
bufs = {n: torch.empty(n, device="cuda") for n in (1, 7 * 7 * 512, 56 * 56 * 64)}
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def t(fn, reps=50):
    out = []
    for i in range(reps + 5):
        flush.zero_()
        s.record()
        fn()
        e.record()
        e.synchronize()
        if i >= 5:
            out.append(s.elapsed_time(e) * 1e3)
    return round(statistics.median(out), 2)


res = {f"fill {n} floats": t(lambda n=n: bufs[n].zero_()) for n in bufs}
res["fill 200704 floats + fill 1 float"] = t(lambda: (bufs[56 * 56 * 64].zero_(), bufs[1].fill_(1.0)))
res["nothing (events only)"] = t(lambda: None)
json.dump(res, sys.stdout, indent=1)
print()

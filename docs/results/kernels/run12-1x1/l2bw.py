"""L2 bandwidth seen by a plain device copy whose source and destination (2 x 8 MB) stay in the 50 MB L2,
against the same copy over 2 x 1 GB (DRAM): bytes read + written / median time (CUDA events)."""
import statistics

import torch

for mb in (8, 1024):
    a = torch.randn(mb * 1024 * 1024 // 4, device="cuda")
    b = torch.empty_like(a)
    for _ in range(10):
        b.copy_(a)
    times = []
    for _ in range(50):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(20):
            b.copy_(a)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 20 * 1e-3)
    t = statistics.median(times)
    print(f"copy 2 x {mb} MB: {2 * a.numel() * 4 / t / 1e12:.2f} TB/s (median of 50 x 20)")

"""One network on the trained-like profile as snn's CUDA graph, measured with whichever snn is importable
(so that one script measures two checkouts alike):

    python3 breakdown.py NET BATCH PHOTO_DIR OUT.json
    ncu --profile-from-start off ... python3 breakdown.py NET BATCH PHOTO_DIR --profile-one   (isolated.py)

- replay: CUDA events around graph.replay(), median of 50 after 5 warm-ups (measure.timing.event_median_s);
- every GPU activity of 5 replays (CUPTI: measure.timing.cuda_activities), per name: count and total duration;
  table.py groups them by kind (measure.timing.activity_kind) and counts kernels per conv; and one more replay's
  activities in order (timeline: name, start, duration in us);
- the host's part: replay() from an idle GPU, how long until it returns and until the GPU is done (median of 30);
- rel_err of the graph's logits against the spec interpreted in float64 on the CPU, same weights and images,
  and the worst of 20 more replays (output poisoned before each).
SNN_PDL=0 in the environment: plain launches instead of programmatic ones (runtime/cuda.py); SNN_PAIRS=0: no pair
kernels (runtime/pairs.py; the pairs' load-time timings are in the JSON's pairs_timed); SNN_BRANCHES=0: no side
branches (runtime/branches.py; the JSON's side_branches: each forked conv and the op that joined it).
Weights: random, seeded, BN-calibrated (bench e2e's), biases shifted to the network's trained-like profile.
"""
import json
import sys

from snn.runtime.cuda import Device
from snn.runtime.executor import Executor, reference
from snn.runtime.graph import GraphRunner
from snn.runtime.measure.timing import (cuda_activities, cuda_events, event_median_s, exit_skipping_teardown,
                                       idle_call_ms)

import trained

net_name, batch, photos, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
profile_one = out_path == "--profile-one"  # one replay between cudaProfilerStart/Stop, for Nsight Compute
t = trained.load(net_name, batch, photos)
env, torch, net, profile, sd_p, x = t.env, t.torch, t.net, t.profile, t.sd, t.x
with torch.no_grad():
    ex = Executor(net, sd_p, env.backend(t.cache), t.cache, str(env.device), "auto")
    runner = GraphRunner(ex, Device())
    y = runner(x)
    ref = reference(net, sd_p, x.double().cpu(), dtype=torch.float64)
    rel_err = float(((y.double().cpu() - ref).norm() / ref.norm()).item())
    trace = ex.last_trace
    replay = runner.replayer(x)
    if profile_one:
        for _ in range(5):
            replay()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        replay()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        sys.exit(0)
    replay_ms = event_median_s(torch, replay, 50, warmup=5) * 1e3
    # the host's part of a call: how long replay() takes to return, and to finish (an idle GPU before each); before
    # CUPTI, which stays attached once used and slows every launch after it
    launch_ms, call_ms = idle_call_ms(torch, replay)
    iters = 5
    acts = [[n, c, round(us, 3)] for n, (c, us) in sorted(cuda_activities(torch, replay, iters).items())]
    # one more replay's activities in order: [name, start us from the first one's start, duration us] (where the
    # chain spends its time between kernels, not only in them)
    evs = sorted(cuda_events(torch, replay), key=lambda e: e.time_range.start)
    timeline = [[e.name, round(e.time_range.start - evs[0].time_range.start, 3), round(e.time_range.elapsed_us(), 3)]
                for e in evs]
    # the same check over 20 more replays, the graph's output poisoned (NaN) before each: a kernel that read
    # what its predecessor had not finished writing (programmatic launches) would show here
    static_out = runner._graphs[(tuple(x.shape), x.dtype)].out
    worst = 0.0
    for _ in range(20):
        static_out.fill_(float("nan"))
        yr = runner(x).double().cpu()
        worst = max(worst, float(((yr - ref).norm() / ref.norm()).item()))
doc = {"network": net.name, "batch": batch, "profile": profile.name, "convs": len(trace),
       "sparse_layers": sum(1 for t in trace if t.path == "sparse"), "replay_ms": round(replay_ms, 4),
       "rel_err_vs_fp64": rel_err, "rel_err_worst_of_20": worst, "iters": iters, "activities": acts,
       "timeline": timeline, "replay_launch_ms": round(launch_ms, 4), "replay_call_ms": round(call_ms, 4),
       "conv_input_sparsity": {t.name: None if t.sparsity is None else round(t.sparsity, 4) for t in trace},
       "conv_kernels": {t.name: t.kernel for t in trace}, "pairs_timed": runner.pair_timings.measured,
       "side_branches": getattr(runner.capture_for(x), "joins", [])}
with open(out_path, "w") as f:
    json.dump(doc, f)
print(f"{net.name} b{batch}: replay {replay_ms:.3f} ms, {sum(a[1] for a in acts) / iters:.0f} activities a replay for "
      f"{len(trace)} convs ({doc['sparse_layers']} sparse), {len(doc['side_branches'])} side branches, rel_err vs fp64 {rel_err:.1e} (worst of 20 more: {worst:.1e})")
exit_skipping_teardown()   # the native teardown after CUPTI has aborted (README, Known limits)

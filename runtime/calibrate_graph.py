"""`snn-run calibrate`'s last step: a shape's dense candidates tried in the network's own CUDA graph.

A kernel timed alone (calibrate's Timer: L2 flushed, one launch) does not rank the dense FP32 candidates
(codegen/dense.py) as the network runs them. In ResNet-152's graph at batch 8 the 35 1x1 1024->256 convs
replayed the network in 6.52 ms on the tile that measured fastest alone (38.2 us) and in 5.64 ms on one level
with it (38.3 us); the 36 1x1 256->1024 convs in 6.54 ms on the fastest alone (26.9 us) and in 6.06 ms on one
that took 36.9 us (docs/results/calibrate/h100/). The neighbours decide it (how a programmatic launch overlaps
the kernel before, whether a K split hands its epilogue to its consumer, what is still in L2); why a tile is
slow next to a given one is not known, so it is measured where it happens.

So, per batch, every conv shape that at least MIN_LAYERS layers share and that has sparsity-free candidates
is tried in the graph: each candidate in turn made the shape's static kernel (every layer of the shape),
the network captured and replayed (median of `reps`), against the calibrated choice measured just before.
A candidate is kept only if it is MARGIN faster and stays so when both are measured again in the other
order. Shapes go in order of their layer count: the JOINT largest tried together (every combination of their
candidates), then each other one on top of the verdicts before it. The verdicts go to the tuning file's "graph"
section (runtime/tuning.py applies them at load); the measurements are not touched. The trials run without pair
kernels (runtime/pairs.py): those replace a pair's two kernels where they time faster than the ones chosen here.
"""
from __future__ import annotations

import gc
import itertools

from . import tuning

MIN_LAYERS = 2    # one layer's difference sits inside a replay's noise
# captures of the same network replayed in 1.695-1.714 ms at batch 1, 6.516-6.555 at batch 8 (median of 40 each,
# calibrate/probe_b*.log): a change must save this much, in both orders, to count
MARGIN = 0.003
# the shapes with the most layers decide most of the time and interact: in ResNet-152 the 1x1 convs on either
# side of layer3's 3x3 ones (one's output is the other's input across blocks); at batch 8 a pair of tiles that
# each measured fine next to the other's calibrated pick replayed 6.1 ms, the best pair 5.6 ms
JOINT = 2
CALIBRATED = "calibrated"


def refine(groups: list[tuple[str, list[str], list[str]]], measure, margin: float = MARGIN, joint: int = JOINT,
           log=None) -> dict:
    """groups: (key, layers, candidate kernels) in the order to try; measure(overrides {layer: kernel}) -> ms
    of the whole network. The first `joint` groups are tried together (every combination), the rest one at a
    time on top. Returns {key: {"kernel": the kept candidate or None, "ms": {candidate: best ms with it,
    "calibrated": ms}}}."""
    chosen: dict[str, str] = {}
    verdicts = {}
    head = groups[:joint] if joint > 1 and len(groups) > 1 else groups[:1]
    stages = [head] + [[g] for g in groups[len(head):]]
    for stage in stages:
        options = {}  # a combination (one kernel or None per group of the stage) -> its overrides
        for combo in itertools.product(*[[None] + cands for _, _, cands in stage]):
            options[combo] = {layer: k for (_, layers, _), k in zip(stage, combo) if k for layer in layers}
        tried = {combo: measure({**chosen, **o}) for combo, o in options.items()}
        none = (None,) * len(stage)
        fastest = min(tried.values())  # within the margin of it: the fewest changes
        best = min((c for c, t in tried.items() if t <= fastest * (1 + margin)),
                   key=lambda c: (sum(k is not None for k in c), tried[c]))
        kept = False
        if tried[best] < tried[none] * (1 - margin):  # a win must hold in the other order too, or it was noise
            again = measure({**chosen, **options[best]}), measure(chosen)
            kept = again[0] < again[1] * (1 - margin)
        if kept:
            chosen.update(options[best])
        for i, (key, _, cands) in enumerate(stage):
            ms = {CALIBRATED: tried[none]} | {k: min(t for c, t in tried.items() if c[i] == k) for k in cands}
            verdicts[key] = {"kernel": best[i] if kept else None, "ms": {k: round(v, 4) for k, v in ms.items()}}
            if len(stage) > 1:
                verdicts[key]["joint"] = [g[0] for g in stage if g[0] != key]
        if log:
            other = min(t for c, t in tried.items() if c != none)
            log(f"  {' + '.join(g[0] for g in stage)}: calibrated {tried[none]:.3f} ms, fastest other {other:.3f} ms"
                + (f"; kept {' + '.join(k or CALIBRATED for k in best)} ({tried[best]:.3f} ms)" if kept
                   else ": calibrated choice kept"))
    return verdicts


def groups_to_try(net, cache, batch: int, measurements: dict, min_layers: int = MIN_LAYERS) -> list:
    """(key, layers, candidates) for the shapes worth a trial at this batch: most layers first."""
    from .calibrate import sparsity_free
    from .measure import common
    data = cache.data
    names = [c.name for c in net.convs if cache.layer_entry(c.name, batch)]
    out = []
    for g in common.distinct_shapes(net, names):
        layers, shape = g["layers"], g["shape"]
        if len(layers) < min_layers:
            continue
        entry = cache.layer_entry(layers[0], batch)
        cands = []
        for lk, choice in entry["levels"].items():
            for k in tuning.candidates(choice):
                m = measurements.get(tuning.kernel_key(data, shape.tag(), batch, float(lk), k))
                correct = m and m.get("rel_err_vs_cudnn_fp32") is not None and \
                    m["rel_err_vs_cudnn_fp32"] < tuning.MAX_REL_ERR
                if correct and k not in cands and sparsity_free(cache.kernel(k)) \
                        and k != entry.get("static_kernel"):
                    cands.append(k)
        if cands:
            out.append((tuning.graph_key(shape.tag(), batch), layers, cands))
    out.sort(key=lambda g: -len(g[1]))
    return out


class GraphTrial:
    """The network on x (a batch of `batch` images) as one CUDA graph, some layers' static kernel overridden
    for the trial only: trial(overrides {layer: kernel}) -> replay ms (median of reps). With keep, the trial's
    output and trace stay in .out and .trace."""

    def __init__(self, env, net, cache, batch: int, sd, x, reps: int = 30):
        self.env, self.net, self.cache, self.batch, self.sd, self.x, self.reps = env, net, cache, batch, sd, x, reps
        self.out = self.trace = None

    def __call__(self, overrides: dict, keep: bool = False) -> float:
        from .executor import Executor
        from .graph import GraphRunner
        from .measure.timing import event_median_s
        env, torch, b = self.env, self.env.torch, self.batch
        saved = {}
        for layer, k in overrides.items():
            e = self.cache.layer_entry(layer, b)
            saved[layer] = e.get("static_kernel")
            e["static_kernel"] = k
        try:
            ex = Executor(self.net, self.sd, env.backend(self.cache), self.cache, str(env.device), "auto")
            runner = GraphRunner(ex, env.dev, pair_kernels=False)   # the trial's kernels, not a pair's in their place
            out = runner(self.x)
            ms = event_median_s(torch, runner.replayer(self.x), self.reps, warmup=5) * 1e3
            if keep:
                self.out, self.trace = out, list(ex.last_trace)
            del runner, ex
        finally:  # the cache as it was: the next trial starts from the verdicts only
            for layer, k in saved.items():
                e = self.cache.layer_entry(layer, b)
                if k is None:
                    e.pop("static_kernel", None)
                else:
                    e["static_kernel"] = k
        gc.collect()
        torch.cuda.empty_cache()
        return ms


def calibrate_in_graph(env, net, spec: str, mpath, tpath, side: dict, built: dict, sd, pool,
                       reps: int = 30, remeasure: bool = False, log=print) -> None:
    """Try the candidates in the graph at each batch of `built` ({batch: the bundle's cache as built, no tuning
    merged}) and write the verdicts into side (the tuning document at tpath, written after each batch)."""
    from . import manifest
    from .graph import GraphUnavailable
    torch = env.torch
    graph = side.setdefault("graph", {})
    sd = {k: v.detach().cpu() for k, v in sd.items()}  # as the engine gets them (runtime/weights.py)
    for b, as_built in built.items():
        tag = f"|b{b}"
        done = {k: v for k, v in graph.items() if k.endswith(tag)}
        if done and not remeasure and tuning.graph_valid(as_built.data, done) and \
                {k for k, *_ in groups_to_try(net, as_built, b, side["measurements"])} <= set(done):
            log(f"in the graph, batch {b}: verdicts already in {tpath}")
            continue
        for k in done:  # measured again from the measurements' picks
            del graph[k]
        tuning.write(tpath, side)
        cache = manifest.load(mpath, net, spec, b, env.cc, tuning_path=tpath)
        groups = groups_to_try(net, cache, b, side["measurements"])
        if not groups:
            continue
        x = pool[torch.arange(b) % pool.shape[0]].to(env.device).contiguous()
        measure = GraphTrial(env, net, cache, b, sd, x, reps)
        log(f"in the graph, batch {b}: {len(groups)} shape(s), {sum(len(c) for *_, c in groups)} candidate(s)")
        try:
            with torch.inference_mode():
                verdicts = refine(groups, measure, log=log)
        except GraphUnavailable as e:
            log(f"in the graph: skipped ({e})")
            return
        shas = cache.data["kernels"]
        for (key, layers, _), v in zip(groups, verdicts.values()):
            graph[key] = dict(v, layers=layers, sha256=shas[v["kernel"]].get("sha256") if v["kernel"] else None)
        tuning.write(tpath, side)

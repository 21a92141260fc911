"""The CUDA-graph path on a real GPU (runtime/graph.py):

- snn_select, compiled here by nvcc from the template, takes the branch dispatch.choose takes for
  every counter value tried (auto, sparse);
- with the real cache (`snn-codegen build ... --batch 1,8`; skips without one): the graph-replayed
  forward pass gives torchvision's logits (same weights, FP32) and the eager path's, and each layer's
  branch is dispatch.choose on the sparsity the graph itself measured;
- the path changes with the input's sparsity, with no re-capture: one graph, two inputs whose
  sparsities straddle the thresholds, different branches, each the right one, and back again.
"""
import copy
import os
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")
from built_cache import built_cache  # noqa: E402
from logits_check import check_close  # noqa: E402
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
torchvision = pytest.importorskip("torchvision")

from snn.codegen.emit import render_selector  # noqa: E402
from snn.runtime import dispatch, executor, weights  # noqa: E402
from snn.runtime.cuda import Device  # noqa: E402
from snn.runtime import graph  # noqa: E402
from snn.runtime.graph import GraphRunner  # noqa: E402
from snn.runtime.kernels import CudaBackend  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def exact_fp32():
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False



def _photos(n):
    """Real photographs from $SNN_PHOTOS (real activation statistics), else smooth synthetic images."""
    from snn.runtime import images
    arrays = []
    folder = os.environ.get("SNN_PHOTOS")
    if folder:
        for p in images.discover(folder)[0]:
            try:
                arrays.append(torch.from_numpy(images.preprocess(p)))
            except Exception:  # the folder holds deliberately broken files for the infer test
                continue
    if not arrays:
        g = torch.Generator().manual_seed(5)
        yy, xx = torch.meshgrid(torch.linspace(0, 1, 224), torch.linspace(0, 1, 224), indexing="ij")
        for _ in range(n):
            a = torch.rand(3, 4, generator=g)
            img = torch.stack([a[i, 0] * xx + a[i, 1] * yy + a[i, 2] * torch.sin(12 * a[i, 3] * (xx + yy))
                               for i in range(3)])
            arrays.append((img - 0.45) / 0.25)
    return torch.stack([arrays[i % len(arrays)] for i in range(n)])


_WEIGHTS = {}


def _weights(net):
    if net.name not in _WEIGHTS:  # BN calibration of the random weights runs once per network
        _WEIGHTS[net.name] = weights.load(net, None, seed=0, device="cuda")[0]
    return _WEIGHTS[net.name]


def _tv(net, sd):
    model = torchvision.models.get_model(net.name, weights=None)
    model.load_state_dict(sd, strict=False)
    return model.eval().cuda()


# --- the selector kernel against the rule ---------------------------------------------------------

def _selector_cubin(tmp_path):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    name, src = render_selector()
    (tmp_path / "s.cu").write_text(src)
    major, minor = torch.cuda.get_device_capability()
    subprocess.run([nvcc, "-cubin", f"-arch=sm_{major}{minor}", "-O3", "-std=c++17", str(tmp_path / "s.cu"),
                    "-o", str(tmp_path / "s.cubin")], check=True)
    return name, tmp_path / "s.cubin"


def test_selector_kernel_matches_choose(tmp_path):
    name, cubin = _selector_cubin(tmp_path)
    dev = Device()
    import ctypes
    P, I64, I32, U64 = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_ulonglong
    entries = [
        {"threshold": 0.55, "levels": {"0.40": {"kernel": "a"}, "0.45": {"kernel": "b"}, "0.50": {"kernel": "c"},
                                       "0.60": {"kernel": "c"}, "0.70": {"kernel": "d"}}},
        {"threshold": 0.45, "levels": {"0.45": {"kernel": "x"}, "0.90": {"kernel": "y"}}},
        {"levels": {"0.50": {"kernel": "p"}, "0.65": {"kernel": "q"}, "0.80": {"kernel": "p"}}},
    ]
    numel = 8 * 256 * 14 * 14
    counts = sorted({0, numel} | {round(l * numel) + d for l in (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9)
                                   for d in (-1, 0, 1)} | set(range(0, numel, numel // 97)))
    zeros = torch.tensor(counts, dtype=torch.int64, device="cuda")
    choice = torch.zeros(len(counts), dtype=torch.int32, device="cuda")
    checked = 0
    for entry in entries:
        for force in ("auto", "sparse"):
            t = dispatch.selector_table(entry, force)
            row = torch.tensor(t.row(), dtype=torch.float64, device="cuda")
            for i in range(len(counts)):
                dev.launch(cubin, name, (1, 1, 1), (32, 1, 1), 0,
                           [(zeros.data_ptr() + 8 * i, P), (row.data_ptr(), P), (numel, I64),
                            (choice.data_ptr() + 4 * i, P), (0, U64), (0, I32)])
            got = choice.tolist()
            for i, z in enumerate(counts):
                assert t.kernel(got[i]) == dispatch.choose(entry, z / numel, force), (entry, force, z)
                checked += 1
    assert checked > 500


def test_switch_node_inside_torch_capture(tmp_path):
    """The mechanism alone: in a torch capture, snn_select sets a SWITCH whose body 0 is a torch op that
    allocates (from a private MemPool) and body 1 writes a constant; replays follow the counter."""
    _, cubin = _selector_cubin(tmp_path)
    dev = Device()
    import ctypes
    P, I64, I32, U64 = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_ulonglong
    entry = {"threshold": 0.5, "levels": {"0.50": {"kernel": "k"}}}
    t = dispatch.selector_table(entry)
    row = torch.tensor(t.row(), dtype=torch.float64, device="cuda")
    zeros = torch.zeros(1, dtype=torch.int64, device="cuda")
    choice = torch.zeros(1, dtype=torch.int32, device="cuda")
    x = torch.arange(1024, dtype=torch.float32, device="cuda")
    side, pool = torch.cuda.Stream(), torch.cuda.MemPool()
    ctx = dev.drv.cuCtxGetCurrent()[1]
    x * 2  # warm-up
    g = torch.cuda.CUDAGraph()
    out = {}
    with torch.cuda.graph(g):
        h = graph.new_switch_handle(dev.drv, torch, ctx, 2)
        dev.launch(cubin, "snn_select", (1, 1, 1), (32, 1, 1), 0,
                   [(zeros.data_ptr(), P), (row.data_ptr(), P), (10, I64), (choice.data_ptr(), P), (int(h), U64), (1, I32)])

        def dense():
            out["y"] = x * 2

        graph.append_switch(dev.drv, torch, ctx, h, [dense, lambda: out["y"].fill_(-1.0)], side, [pool, None])
        total = out["y"].sum()
    for z, want_branch in ((0, 0), (7, 1), (4, 0), (5, 1)):
        zeros.fill_(z)
        g.replay()
        torch.cuda.synchronize()
        assert choice.item() == want_branch
        assert total.item() == (float((x * 2).sum()) if want_branch == 0 else -1024.0)


# --- the real cache ---------------------------------------------------------------------------------

def _real_cache(name, batch, dev):
    net, cache = built_cache(name, batch, dev.name, dev.compute_capability)
    if "selector" not in cache.data:
        pytest.skip(f"{cache.path} has no selector: rebuild it")
    return net, cache


def _check_branches(runner, ex, cache, batch):
    """Every device-dispatched layer took choose()'s branch for the sparsity the graph counted, or ran on the pair
    kernel that the graph put it on with its neighbour (runtime/pairs.py: a fixed layer, either branch's kernel)."""
    n = 0
    pair_kernels = {k for lay in cache.layers.values() for e in lay.get("batches", {}).values()
                    for k in (e.get("pair") or {}).get("kernels", [])}
    for t in ex.last_trace:
        entry = cache.layer_entry(t.name, batch)
        if t.sparsity is None:
            continue
        if t.kernel and t.kernel.startswith("dpair_"):
            assert t.kernel in pair_kernels, (t.name, t.kernel)
        else:
            assert t.kernel == dispatch.choose(entry, t.sparsity, ex.force), (t.name, t.sparsity, t.kernel)
        n += 1
    return n


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("name", ["resnet152", "vgg19", "densenet201"])
def test_graph_matches_eager_and_torchvision(name, batch):
    dev = Device()
    net, cache = _real_cache(name, batch, dev)
    sd = _weights(net)
    x = _photos(batch).cuda()
    with torch.inference_mode():
        ref = _tv(net, sd)(x)
        for force in ("auto", "sparse"):
            ex = executor.Executor(net, sd, CudaBackend(dev, cache), cache, "cuda", force)
            eager = ex.forward(x)
            eager_trace = {t.name: t for t in ex.last_trace}
            runner = GraphRunner(ex, dev)
            out = runner.forward(x)
            check_close(out, ref)
            check_close(out, eager)
            assert _check_branches(runner, ex, cache, batch) > 0
            for t in ex.last_trace:  # the graph counts what the eager pass counted (atomics: same zeros)
                if t.sparsity is not None and eager_trace[t.name].sparsity is not None:
                    assert abs(t.sparsity - eager_trace[t.name].sparsity) < 1e-3, t.name
            if force == "sparse":
                assert all(t.path == "sparse" for t in ex.last_trace if t.sparsity is not None)
            out2 = runner.forward(x)  # a second replay: same graph, same answer
            check_close(out2, ref)
            assert runner.captures == 1


def test_path_follows_sparsity_without_recapture():
    """Thresholds placed between the sparsities two inputs produce: one graph must take different
    branches for them, each time the branch choose() takes, and switch back."""
    batch = 1
    dev = Device()
    net, cache = _real_cache("resnet152", batch, dev)
    sd = _weights(net)
    a = _photos(batch).cuda()
    b = torch.zeros_like(a)  # the mean image: flat activations, other zero fractions
    with torch.inference_mode():
        probe = executor.Executor(net, sd, CudaBackend(dev, cache), cache, "cuda", "auto", trace=True)
        probe.forward(a)
        sa = {t.name: t.sparsity for t in probe.last_trace if t.sparsity is not None}
        probe.forward(b)
        sb = {t.name: t.sparsity for t in probe.last_trace if t.sparsity is not None}
        cache2 = copy.deepcopy(cache)
        moved = 0
        for lname in sa:
            e = cache2.layer_entry(lname, batch)
            if e:
                e.pop("static_kernel", None)  # a calibrated cache: every layer decides on the device here
            lo, hi = sorted((sa[lname], sb[lname]))
            if e and hi - lo > 0.02 and hi >= min(float(k) for k in e["levels"]) + 0.01:
                e["threshold"] = round((lo + hi) / 2, 4)
                moved += 1
            elif e:
                e["threshold"] = 2.0  # dense for both: only the moved layers decide
        assert moved >= 3, "the two inputs' sparsities do not differ enough to test anything"
        ex = executor.Executor(net, sd, CudaBackend(dev, cache2), cache2, "cuda", "auto")
        runner = GraphRunner(ex, dev)
        ref_a, ref_b = _tv(net, sd)(a), _tv(net, sd)(b)
        seen = []
        for x, ref in ((a, ref_a), (b, ref_b), (a, ref_a)):
            out = runner.forward(x)
            check_close(out, ref)
            _check_branches(runner, ex, cache2, batch)
            seen.append({t.name: t.path for t in ex.last_trace if t.sparsity is not None})
        assert runner.captures == 1
        flipped = [n for n in seen[0] if seen[0][n] != seen[1][n]]
        assert len(flipped) >= 3, flipped
        assert seen[0] == seen[2]  # and back: nothing stale baked into the graph

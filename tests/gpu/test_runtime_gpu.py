"""The runtime on a real GPU, with stand-in kernels compiled here by nvcc:

- snn_epilogue written to the signature in docs/interfaces.md (the real one comes from codegen/emit.py);
- a naive direct convolution per layer shape, wrapped in manifest steps (memset output, launch with
  input / workspace / CRSN weight / output), so that every runtime path runs: cubin loading, launches on
  torch's stream, weight layouts, workspaces, the zero counter, dispatch, padded short batches.

Checked against torchvision's model with the same weights (FP32, TF32 off): relative error < 1e-4 and
identical top-5. The real kernels' own tests live elsewhere; these test the runtime around them.
"""
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from built_cache import built_cache  # noqa: E402
from logits_check import check_close  # noqa: E402
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
torchvision = pytest.importorskip("torchvision")

from click.testing import CliRunner  # noqa: E402

from snn import cli  # noqa: E402
from snn.codegen import bundle  # noqa: E402
from snn.codegen.spec import load_spec  # noqa: E402
from snn.runtime import dispatch, executor, manifest, weights  # noqa: E402
from snn.runtime.cuda import Device  # noqa: E402
from snn.runtime.kernels import CudaBackend  # noqa: E402

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
LEVELS = (0.4, 0.6, 0.8)

EPILOGUE_CU = r"""
extern "C" __global__ void snn_epilogue(const float* in, const float* scale, const float* shift,
    const float* residual, float* out, unsigned long long* zeros, long long total, int C, int relu)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned z = 0;
    if (i < total) {
        int c = (int)(i % C);
        float v = __fadd_rn(__fmul_rn(in[i], scale[c]), shift[c]);
        if (residual) v += residual[i];
        if (relu) v = fmaxf(v, 0.f);
        out[i] = v;
        z = (v == 0.f);
    }
    if (zeros) {
        __shared__ unsigned block_zeros;
        if (threadIdx.x == 0) block_zeros = 0;
        __syncthreads();
        unsigned w = __popc(__ballot_sync(0xffffffffu, z));
        if ((threadIdx.x & 31) == 0 && w) atomicAdd(&block_zeros, w);
        __syncthreads();
        if (threadIdx.x == 0 && block_zeros) atomicAdd(zeros, (unsigned long long)block_zeros);
    }
}
"""

NAIVE_CU = r"""
extern "C" __global__ void {name}(const float* __restrict__ in, const unsigned char* ws,
                                  const float* __restrict__ w, float* out)
{{
    const int B = {B}, C = {C}, H = {H}, W = {W}, N = {N}, R = {R}, S = {S};
    const int SH = {sh}, SW = {sw}, PH = {ph}, PW = {pw}, P = {P}, Q = {Q};
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)B * P * Q * N) return;
    int n = idx % N; long long t = idx / N;
    int q = t % Q; t /= Q;
    int p = t % P; int b = (int)(t / P);
    float acc = 0.f;
    for (int r = 0; r < R; ++r) {{
        int h = p * SH - PH + r;
        if (h < 0 || h >= H) continue;
        for (int s = 0; s < S; ++s) {{
            int x = q * SW - PW + s;
            if (x < 0 || x >= W) continue;
            const float* a = in + (((long long)b * H + h) * W + x) * C;
            for (int c = 0; c < C; ++c) acc += a[c] * w[((c * R + r) * S + s) * N + n];
        }}
    }}
    out[idx] += acc;  // the output was zeroed by the memset step
}}
"""


def _compile(src: str, path: Path, arch: str) -> Path:
    path.with_suffix(".cu").write_text(src)
    subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-O3", "-o", str(path), str(path.with_suffix(".cu"))],
                   check=True, capture_output=True, text=True)
    return path


def build_standin_cache(root: Path, net, batches, threshold=0.5, eligible_only=None):
    """generated/<net>/standin/manifest.json in the documented format, with stand-in kernels."""
    dev = Device()
    cc = dev.compute_capability
    arch = f"sm_{cc[0]}{cc[1]}"
    d = root / net.name / "standin"
    d.mkdir(parents=True, exist_ok=True)
    convs = [c for c in net.convs if c.input_op != "input"]
    jobs, kernels, layers = [], {}, []
    for b in batches:
        srcs = []
        for shape in dict.fromkeys(c.shape for c in convs):
            name = f"naive_{shape.tag()}_b{b}"
            srcs.append(NAIVE_CU.format(name=name, B=b, C=shape.C, H=shape.H, W=shape.W, N=shape.N, R=shape.R,
                                        S=shape.S, sh=shape.stride[0], sw=shape.stride[1], ph=shape.padding[0],
                                        pw=shape.padding[1], P=shape.P, Q=shape.Q))
            total = b * shape.P * shape.Q * shape.N
            kernels[name] = {"cubin": f"naive_b{b}.cubin", "shape": manifest.shape_dict(shape), "batch": b,
                             "config": {}, "workspace": {"ws_vals": 4096}, "weight_layout": "CRSN",
                             "steps": [{"op": "memset", "buffer": "output"},
                                       {"op": "launch", "function": name, "grid": [(total + 127) // 128, 1, 1],
                                        "block": [128, 1, 1], "smem": 0,
                                        "args": ["input", "ws_vals", "weight", "output"]}]}
        jobs.append(("\n".join(srcs), d / f"naive_b{b}.cubin"))
    jobs.append((EPILOGUE_CU, d / "epilogue.cubin"))
    with ThreadPoolExecutor(len(jobs)) as pool:
        list(pool.map(lambda j: _compile(j[0], j[1], arch), jobs))
    for c in convs:
        layers.append({"index": c.index, "name": c.name, "shape": manifest.shape_dict(c.shape), "batches": {
            str(b): {"threshold": threshold, "threshold_source": "default",
                     "levels": {f"{l:.2f}": {"kernel": f"naive_{c.shape.tag()}_b{b}", "predicted_us": 1.0,
                                             "measured_us": None} for l in LEVELS}} for b in batches}})
    doc = {"format": bundle.FORMAT, "network": net.name, "gpu": "standin", "arch": arch, "compute_capability": list(cc),
           "batches": list(batches), "levels": list(LEVELS), "nvcc": "test",
           "epilogue": {"cubin": "epilogue.cubin", "function": "snn_epilogue"},
           "kernels": kernels, "layers": layers}
    (d / "manifest.json").write_text(json.dumps(doc))
    return d / "manifest.json"


def torchvision_model(net, sd):
    model = torchvision.models.get_model(net.name, weights=None)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing)
    return model.eval().cuda()


@pytest.fixture(autouse=True)
def exact_fp32():
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def _photos(n, seed=0):
    """Smooth, photo-like test images (gradients + blobs), normalised as the preprocessing does."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, 224), torch.linspace(0, 1, 224), indexing="ij")
    out = []
    for _ in range(n):
        a = torch.rand(3, 4, generator=g)
        img = torch.stack([a[i, 0] * xx + a[i, 1] * yy + a[i, 2] * torch.sin(12 * a[i, 3] * (xx + yy)) for i in range(3)])
        out.append((img - 0.45) / 0.25)
    return torch.stack(out)



@pytest.fixture(scope="module")
def resnet50(tmp_path_factory):
    net = load_spec(ROOT / "network_specs" / "resnet50.yaml")
    sd, _, _ = weights.load(net, None, seed=0, device="cuda")  # what `snn-run infer` uses without --weights
    root = tmp_path_factory.mktemp("cache")
    path = build_standin_cache(root, net, batches=(1, 2, 8))
    return net, sd, root, path


def test_epilogue_counts_zeros_exactly(resnet50):
    net, sd, root, path = resnet50
    cache = manifest.load(path, net, "resnet50.yaml", 8, Device().compute_capability)
    be = CudaBackend(Device(), cache)
    x = torch.randn(3, 40, 7, 9, device="cuda").contiguous(memory_format=torch.channels_last)
    res = torch.randn_like(x)
    scale, shift = torch.rand(40, device="cuda") + 0.5, torch.randn(40, device="cuda")
    counters = torch.zeros(2, dtype=torch.int64, device="cuda")
    out = torch.full_like(x, float("nan"))
    be.epilogue(x, scale, shift, res, out, counters, 1, True)
    want = torch.relu(x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1) + res)
    assert torch.allclose(out, want, atol=1e-6)
    assert counters[1].item() == (want == 0).sum().item() and counters[0].item() == 0


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("force", ["dense", "sparse", "auto"])
def test_resnet50_matches_torchvision(resnet50, force, batch):
    net, sd, root, path = resnet50
    dev = Device()
    cache = manifest.load(path, net, "resnet50.yaml", batch, dev.compute_capability)
    ex = executor.Executor(net, sd, CudaBackend(dev, cache), cache, "cuda", force, trace=True)
    x = _photos(batch).cuda()
    with torch.inference_mode():
        logits = ex.forward(x)
        ref = torchvision_model(net, sd)(x)
    check_close(logits, ref)
    paths = [t.path for t in ex.last_trace]
    if force == "dense":
        assert set(paths) == {"dense"}
    elif force == "sparse":
        assert paths.count("sparse") == len(net.convs) - 1
    else:
        for t in ex.last_trace:
            want = dispatch.choose(cache.layer_entry(t.name, batch), t.sparsity) if t.sparsity is not None else None
            assert t.kernel == want, t
        assert "sparse" in paths and "dense" in paths


@pytest.mark.parametrize("name", ["vgg16", "densenet121"])
def test_other_families_forced_sparse_match_torchvision(tmp_path, name):
    net = load_spec(ROOT / "network_specs" / f"{name}.yaml")
    sd = weights.random_init(net, seed=1)
    path = build_standin_cache(tmp_path, net, batches=(2,))
    dev = Device()
    cache = manifest.load(path, net, f"{name}.yaml", 2, dev.compute_capability)
    x = _photos(2, seed=3).cuda()
    with torch.inference_mode():
        ref = torchvision_model(net, sd)(x)
        for force in ("dense", "sparse"):
            ex = executor.Executor(net, sd, CudaBackend(dev, cache), cache, "cuda", force)
            check_close(ex.forward(x), ref)


def test_infer_cli_end_to_end(resnet50, tmp_path):
    from PIL import Image
    net, sd, root, path = resnet50
    folder = tmp_path / "photos"
    (folder / "nested").mkdir(parents=True)
    for i, img in enumerate(_photos(3, seed=7)):
        arr = ((img * 0.25 + 0.45).clamp(0, 1) * 255).byte().permute(1, 2, 0).numpy()
        Image.fromarray(arr).resize((320, 240)).save(folder / ("nested" if i == 2 else ".") / f"p{i}.png")
    (folder / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    out = tmp_path / "r.json"
    r = CliRunner().invoke(cli.run_main, ["infer", str(folder), "--spec", str(ROOT / "network_specs/resnet50.yaml"),
                                          "--cache", str(root), "--batch", "8", "--output", str(out), "--trace"])
    assert r.exit_code == 3, r.output
    assert "broken.jpg" in r.output and "seeded random" in r.output   # 3 images padded to the batch of 8
    doc = json.loads(out.read_text())
    assert [Path(i["path"]).name for i in doc["images"]] == ["p0.png", "p1.png", "p2.png"]
    assert all(len(i["top"]) == 5 for i in doc["images"])
    assert doc["summary"]["sparse_layer_runs"] > 0 and doc["summary"]["images"] == 3
    # the same images through torchvision: the same top-5
    from snn.runtime import images
    x = torch.stack([torch.from_numpy(images.preprocess(folder / p)) for p in ("p0.png", "p1.png", "nested/p2.png")]).cuda()
    with torch.inference_mode():
        ref = torchvision_model(net, sd)(x).topk(5).indices.tolist()
    assert [[t["index"] for t in i["top"]] for i in doc["images"]] == ref


def test_missing_cache_one_line(tmp_path):
    (tmp_path / "a.png").write_bytes(b"x")
    r = CliRunner().invoke(cli.run_main, ["infer", str(tmp_path), "--spec", str(ROOT / "network_specs/resnet50.yaml"),
                                          "--cache", str(tmp_path / "nocache")])
    assert r.exit_code == 1 and "snn-codegen build" in r.output and len(r.output.strip().splitlines()) == 1


# --- the real cache, where `snn-codegen build` has made one for this GPU ---------------------------

def _real_photos(n):
    """Real photographs (real activation statistics): the folder $SNN_PHOTOS (e.g. scikit-image's sample
    photos copied there), else scikit-image's bundled photos where installed, else _photos."""
    import os
    import numpy as np
    from snn.runtime import images
    folder = os.environ.get("SNN_PHOTOS")
    if folder:
        paths, _ = images.discover(folder)
        arrays = []
        for p in paths:
            try:
                arrays.append(images.preprocess(p))
            except Exception:  # the folder holds deliberately broken files for the infer test
                continue
        if arrays:
            return torch.stack([torch.from_numpy(arrays[i % len(arrays)]) for i in range(n)])
    try:
        from skimage import data
        from PIL import Image
    except ImportError:
        return _photos(n, seed=5)
    import tempfile
    picks = [getattr(data, k)() for k in ("astronaut", "coffee", "chelsea", "rocket") if hasattr(data, k)]
    out = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(n):
            a = picks[i % len(picks)]
            a = np.stack([a] * 3, -1) if a.ndim == 2 else a[..., :3]
            Image.fromarray(a.astype(np.uint8)).save(f"{d}/{i}.png")
            out.append(torch.from_numpy(images.preprocess(f"{d}/{i}.png")))
    return torch.stack(out)


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("name", ["resnet152", "densenet201", "vgg19"])
def test_built_cache_matches_torchvision(name, batch):
    dev = Device()
    net, cache = built_cache(name, batch, dev.name, dev.compute_capability)
    sd, _, _ = weights.load(net, None, seed=0, device="cuda")
    x = _real_photos(batch).cuda()
    with torch.inference_mode():
        ref = torchvision_model(net, sd)(x)
        for force in ("sparse", "auto"):
            ex = executor.Executor(net, sd, CudaBackend(dev, cache), cache, "cuda", force, trace=True)
            check_close(ex.forward(x), ref)
            if force == "sparse":
                assert any(t.path == "sparse" for t in ex.last_trace)

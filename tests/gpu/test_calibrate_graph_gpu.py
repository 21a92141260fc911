"""calibrate's in-graph trials on a real GPU (runtime/calibrate_graph.py), with the real ResNet-152 cache
(`snn-codegen build resnet152 --batch 1,8`; skips without one): a trial runs the overriding dense candidate on
every layer of the shape inside the captured graph, its logits stay torchvision's, and the cache is as before."""
import copy

import pytest

torch = pytest.importorskip("torch")
from built_cache import built_cache  # noqa: E402
from logits_check import check_close  # noqa: E402
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
torchvision = pytest.importorskip("torchvision")

from snn.runtime import calibrate_graph, weights  # noqa: E402
from snn.runtime.calibrate import sparsity_free  # noqa: E402
from snn.runtime.measure.timing import Env  # noqa: E402

pytestmark = pytest.mark.gpu


def test_a_trial_runs_its_candidate_in_the_graph_and_leaves_the_cache_as_it_was():
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    env = Env(False)
    net, cache = built_cache("resnet152", 1, env.name, env.cc)
    layers = [c.name for c in net.convs if c.shape == next(c.shape for c in net.convs if c.name == "layer3.1.conv1")]
    entry = cache.layer_entry(layers[0], 1)
    dense = [c["kernel"] for lv in entry["levels"].values() for c in lv.get("candidates", [])
             if sparsity_free(cache.kernel(c["kernel"]))]
    if not dense:
        pytest.skip(f"{cache.path}: no dense candidates for {layers[0]}: rebuild it")
    kernel = next((k for k in dense if k != entry.get("static_kernel")), dense[0])
    before = {name: copy.deepcopy(cache.layer_entry(name, 1)) for name in layers}
    sd = weights.load(net, None, seed=0, device="cuda")[0]
    sd = {k: v.detach().cpu() for k, v in sd.items()}
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(1, 3, 224, 224, generator=g) * 2 - 1).cuda()
    trial = calibrate_graph.GraphTrial(env, net, cache, 1, sd, x, reps=3)
    with torch.inference_mode():
        ms = trial({name: kernel for name in layers}, keep=True)
        model = torchvision.models.get_model("resnet152", weights=None)
        model.load_state_dict(sd, strict=False)
        ref = model.eval().cuda()(x)
    assert ms > 0
    assert len(layers) >= 30 and {t.kernel for t in trial.trace if t.name in layers} == {kernel}
    check_close(trial.out, ref)
    assert {name: cache.layer_entry(name, 1) for name in layers} == before

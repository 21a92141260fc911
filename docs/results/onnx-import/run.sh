#!/bin/bash
# An ONNX-imported ResNet-50 on one GPU: torchvision's resnet50 with seeded random weights (BN statistics
# calibrated, as snn-run's default weights) exported to ONNX, `snn-codegen import` -> spec + weights,
# `snn-codegen build`, `snn-run infer` on the photos, and the top-5 compared with torchvision's model run on
# the same weights and the same preprocessed images (FP32 with TF32 off, and FP64).
#   bash docs/results/onnx-import/run.sh OUT PHOTO_DIR [WHEEL_DIR]
# WHEEL_DIR: wheels of onnx (and protobuf, ml_dtypes) for a machine without network.
set -uo pipefail
out=${1:?usage: run.sh OUT PHOTO_DIR [WHEEL_DIR]}; photos=$(realpath "${2:?PHOTO_DIR}"); wheels=${3:-}
out=$(realpath -m "$out"); mkdir -p "$out"; work=$(mktemp -d)
cd "$(dirname "$0")/../../.."
. docs/results/env.sh
if ! python3 -c "import onnx" 2>/dev/null && [ -n "$wheels" ]; then
  pip install --quiet --no-index --find-links "$wheels" --target "$work/pylib" onnx protobuf ml_dtypes
  export PYTHONPATH="$work/pylib${PYTHONPATH:+:$PYTHONPATH}"
fi
env_report > "$out/env.txt"; python3 -c "import onnx; print('onnx', onnx.__version__)" >> "$out/env.txt"
{
python3 - "$work" <<'PY'
import sys, torch, torchvision
from snn.codegen.spec import load_spec
from snn.runtime import weights
work = sys.argv[1]
sd, _, _ = weights.load(load_spec("resnet50"), None, seed=0)
m = torchvision.models.resnet50(weights=None)
m.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
torch.onnx.export(m.eval(), torch.randn(1, 3, 224, 224), f"{work}/resnet50.onnx", input_names=["image"],
                  output_names=["logits"], opset_version=17, dynamo=False)
torch.save(m.state_dict(), f"{work}/torchvision_resnet50.pth")
print("exported", f"{work}/resnet50.onnx")
PY
  echo "\$ snn-codegen import resnet50.onnx"
  snn-codegen import "$work/resnet50.onnx" --out "$out/resnet50_onnx.yaml" --weights-out "$work/resnet50_onnx.pth" --name resnet50_onnx
  snn-codegen build "$out/resnet50_onnx.yaml" --gpu "$GPU" --batch 8 -j 16 --out "$work/gen" 2>&1 | tail -2
  echo "\$ snn-run infer PHOTOS --spec resnet50_onnx.yaml --batch 8 --weights resnet50_onnx.pth"
  snn-run infer "$photos" --spec "$out/resnet50_onnx.yaml" --cache "$work/gen" --batch 8 \
    --weights "$work/resnet50_onnx.pth" --top 5 --output "$out/infer.json"
  echo "infer exit code $?"
  python3 - "$work" "$out" <<'PY'
import json, sys, torch, torchvision
from snn.runtime import images
work, out = sys.argv[1:]
doc = json.load(open(f"{out}/infer.json"))
m = torchvision.models.resnet50(weights=None)
m.load_state_dict(torch.load(f"{work}/torchvision_resnet50.pth"))
m = m.eval().cuda()
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
rows, same32, same64 = [], 0, 0
for rec in doc["images"]:
    x = torch.from_numpy(images.preprocess(rec["path"]))[None].cuda()
    with torch.no_grad():
        t32 = m(x)[0].topk(5).indices.tolist()
        t64 = m.double()(x.double())[0].topk(5).indices.tolist()
        m.float()
    ours = [t["index"] for t in rec["top"]]
    same32 += ours == t32
    same64 += ours == t64
    rows.append({"image": rec["path"].split("/")[-1], "snn": ours, "torchvision_fp32": t32, "torchvision_fp64": t64})
res = {"images": len(rows), "top5_identical_to_torchvision_fp32": same32, "top5_identical_to_fp64": same64,
       "sparse_share": doc["summary"]["sparse_share"], "skipped": doc["skipped"], "rows": rows}
json.dump(res, open(f"{out}/top5_vs_torchvision.json", "w"), indent=1)
print(f"top-5 identical to torchvision FP32 on {same32}/{len(rows)} images, to FP64 on {same64}/{len(rows)}; "
      f"{doc['summary']['sparse_share']:.1%} of conv layer runs sparse; skipped: {[s['path'].split('/')[-1] for s in doc['skipped']]}")
PY
} > "$out/log.txt" 2>&1
tail -4 "$out/log.txt"

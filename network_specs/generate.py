"""Write the YAML specs of the paper's eight networks: torchvision's models at 224x224, through the
PyTorch importer (`snn-codegen import resnet50` writes the same file as this does).

    python network_specs/generate.py            # rewrites network_specs/*.yaml
    python network_specs/generate.py --check    # exit 1 if a checked-in spec differs

Needs torch, torchvision and snn installed (pip install -e '.[gpu]', or just torch and torchvision); no
weights are downloaded. Node names and `param` fields are torchvision's module names, so a torchvision
state_dict maps onto the spec directly (`<param>.weight`, `<param>.bias`, `<param>.running_mean`, ...).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NETWORKS = ("resnet50", "resnet101", "resnet152", "densenet121", "densenet169", "densenet201", "vgg16", "vgg19")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare with the checked-in files")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: this folder)")
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401

        from snn.codegen.importer.torch_model import convert
    except ImportError as e:
        print(f"network_specs/generate.py needs torch, torchvision and snn installed ({e}): "
              "pip install torch torchvision", file=sys.stderr)
        return 2
    stale = []
    for name in NETWORKS:
        path = args.out / f"{name}.yaml"
        text = convert(name).text
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
            print(f"wrote {path} ({text.count(chr(10) + '  - ')} nodes)")
    if stale:
        print(f"out of date: {', '.join(stale)} (run python network_specs/generate.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

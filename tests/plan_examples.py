"""The worked examples the plan tests share (their arithmetic is in the tests' comments)."""
from pathlib import Path

from snn.codegen.config import KernelConfig
from snn.codegen.gpu import load_gpu
from snn.codegen.plan import parse_levels
from snn.codegen.spec import ConvShape

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "network_specs").glob("*.yaml"))
H100 = load_gpu("h100")
LEVELS = parse_levels("0.4:0.9:0.05")

# A 3x3 stride-1 pad-1 conv, 64 -> 128 channels on 56x56, and one config; a 1x1 conv.
SHAPE = ConvShape(64, 128, 56, 56, 3, 3, (1, 1), (1, 1))
CFG = KernelConfig(th=4, tw=4, tc=16, threads=128, nt=1)
ONE_BY_ONE = ConvShape(64, 64, 56, 56, 1, 1, (1, 1), (0, 0))

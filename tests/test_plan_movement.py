"""Stage 2, data movement (codegen/plan/movement.py): worked examples (arithmetic in the comments) and
the cut."""
import math

import pytest

from snn.codegen.config import KernelConfig
from snn.codegen.plan import MODELS, data_movement, stages

from plan_examples import CFG, H100, ONE_BY_ONE, SHAPE


def test_stage2_paper_data_movement_worked_example():
    # Table 2 per image, in elements, with rho = 1 - 0.5:
    #   input   H*W*C*rho             = 56*56*64*0.5              =    100352
    #   weights (H/TH)(W/TW)*R*S*C*N  = 14*14*9*64*128            =  14450688
    #   output  H*W*N*C/TC            = 56*56*128*(64/16)         =   1605632
    #   sum 16156672 elements * 4 B * B=2                          = 129253376 bytes
    assert data_movement(SHAPE, CFG, 2, 0.5, "paper") == 129253376


def test_stage2_snn_data_movement_worked_example():
    # 1x1, 4x7 tiles (14*8 = 112 of them), tc = C = 64, batch 2, rho 0.5, bytes from L2 into the SMs:
    #   input   2 * 56*56*64*0.5 nonzeros * 8 B (value + position) = 1605632
    #           + 2 * 112 tiles * 64 channel counts * 4 B          =   57344
    #   weights 2 * 112 tiles * 64*64*4 B                          = 3670016
    #   atomics 2 * 56*56*64 outputs * 1 channel tile * 8 B (RMW)  = 3211264   -> 8544256
    assert data_movement(ONE_BY_ONE, KernelConfig(4, 7, 64, 64, 1), 2, 0.5, "snn") == 8544256


@pytest.mark.parametrize("model", MODELS)
def test_stage2_keeps_those_with_least_data_movement(model):
    st = stages(SHAPE, H100, 2, 0.5, model)
    fam = [sum(c.warp_tiled == ws for c in st["stage1"]) for ws in (False, True)]
    assert len(st["stage2"]) == sum(math.ceil(n / (2 if model == "snn" else 3)) for n in fam)
    for ws in (False, True):  # "snn" ranks each kernel family on its own (warp-tiled blocks re-read weights less)
        kept = [data_movement(SHAPE, c, 2, 0.5, model) for c in st["stage2"] if c.warp_tiled == ws]
        dropped = [data_movement(SHAPE, c, 2, 0.5, model) for c in set(st["stage1"]) - set(st["stage2"])
                   if c.warp_tiled == ws]
        assert (kept == sorted(kept) and max(kept) <= min(dropped)) if kept else not dropped
    assert set(st["stage3"]) == set(st["stage2"])

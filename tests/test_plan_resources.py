"""The resource estimate against the emitter's rules (codegen/plan/resources.py), worked examples with
the arithmetic in the comments."""

import pytest

from snn.codegen import emit
from snn.codegen.config import KernelConfig
from snn.codegen.plan import config_space, estimate_resources, stages
from snn.codegen.plan.occupancy import table_occupancy
from snn.codegen.plan.resources import kernel_params
from snn.codegen.plan.space import space_arrays
from snn.codegen.plan.tables import config_table, space_table
from snn.codegen.spec import ConvShape

from plan_examples import CFG, H100, ONE_BY_ONE, SHAPE


def test_resource_estimate_worked_example():
    # The emitted kernel (emit.geometry): in-tile 6x6 = 36 pixels, NWORDS 2; weight ring slot
    # 9 taps * 128 threads * 4 B = 4608, WD = min(4, tc, 20480 // 4608) = 4 -> 18432; KC = 16 (all of tc
    # fits 40 KB): xs 36*16*4 = 2304 + masks 16*2*4 = 128 -> 2432 (a multiple of 16) + 18432 = 20864,
    # which is exactly what ptxas reports for this kernel (sm_90, nvcc 13).
    # regs = 16 accumulators + 9 taps + REG_BASE 26 = 51 (ptxas: 72; see docs/costmodel.md for the spread)
    assert estimate_resources(SHAPE, CFG) == (51, 20864)
    # the 7x7 stem: 9x13 = 117 pixels, 4 words; slot 49*64*4 = 12544 > 20480/2 -> WD 1; KC 3:
    # 117*3*4 + 3*4*4 = 1452 -> 1456 (16-byte aligned ring) + 12544 = 14000 (ptxas: 14000);
    # regs 8 + 49 + 26 = 83 (ptxas: 78)
    stem = ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3))
    assert estimate_resources(stem, KernelConfig(2, 4, 3, 64, 1)) == (83, 14000)
    # the launch-bounds cap: 16x4 tile, nt 4 on 3x3 = 256 + 36 + 26 -> capped at emit.register_cap = 255
    big = KernelConfig(4, 4, 8, 32, 4)
    assert emit.register_cap(32, emit.min_blocks(SHAPE, big)) == 255
    assert estimate_resources(SHAPE, big)[0] == min(255, 64 + 36 + 26)


def test_unbuildable_configs_are_not_launchable():
    # No conv of the eight networks has one, but a 7x7 conv with 256 output channels per block does:
    # one ring slot is 49 taps * 256 threads * 4 B = 50176 B > the 40 KB static budget: no KC fits.
    s = ConvShape(64, 256, 56, 56, 7, 7, (1, 1), (3, 3))
    bad = KernelConfig(1, 1, 4, 256, 1)
    assert bad in config_space(s)
    with pytest.raises(ValueError):
        emit.chunk_channels(s, bad)
    with pytest.raises(ValueError):
        estimate_resources(s, bad)
    tab = config_table(s, bad)
    assert not tab["buildable"][0] and not table_occupancy(tab, H100)["feasible"][0]
    assert bad not in stages(s, H100, 1, 0.5)["launchable"]


@pytest.mark.parametrize("shape", [
    SHAPE, ONE_BY_ONE, ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3)), ConvShape(512, 512, 7, 7, 3, 3, (1, 1), (1, 1)),
    ConvShape(256, 512, 56, 56, 1, 1, (2, 2), (0, 0)), ConvShape(128, 128, 56, 56, 3, 3, (2, 2), (1, 1)),
    ConvShape(1664, 128, 14, 14, 1, 1, (1, 1), (0, 0)), ConvShape(64, 64, 224, 224, 3, 3, (1, 1), (1, 1)),
    ConvShape(64, 256, 56, 56, 7, 7, (1, 1), (3, 3))])
def test_vectorised_resources_agree_with_the_emitter(shape):
    """Every config of the space: the cost model's array version of the emitter's rules gives the
    same WD, MINB, register cap and KC (0 exactly where emit.chunk_channels raises)."""
    sp = space_arrays(shape)
    k = kernel_params(shape, sp["th"], sp["tw"], sp["tc"], sp["threads"], sp["nt"])
    for i, c in enumerate(config_space(shape)):
        assert k["wd"][i] == emit.weight_ring_depth(shape, c)
        assert k["minb"][i] == emit.min_blocks(shape, c)
        assert k["reg_cap"][i] == emit.register_cap(c.threads, emit.min_blocks(shape, c))
        try:
            kc = emit.chunk_channels(shape, c)
        except ValueError:
            kc = 0
        assert k["kc"][i] == kc, c


@pytest.mark.parametrize("shape", [SHAPE, ONE_BY_ONE, ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0)),
                                   ConvShape(60, 30, 13, 11, 3, 3, (2, 2), (1, 1))])
def test_cluster_fit_agrees_with_the_emitter(shape):
    """The tables' cluster_fit (arrays) is kernel_rules.cluster_split (what emit renders) for every buildable
    config of the space, and some configs of each shape fit."""
    tab = space_table(shape)
    for i, c in enumerate(config_space(shape)):
        if tab["buildable"][i]:
            assert bool(tab["cluster_fit"][i]) == emit.cluster_split(shape, c), c
    assert tab["cluster_fit"].any()

"""The configuration space per kernel family (codegen/plan/space.py)."""

import numpy as np

from snn.codegen import emit
from snn.codegen.gpu import known_gpus, load_gpu
from snn.codegen.plan import config_space, plan_shape, stages, ws_space
from snn.codegen.plan.explain import explain_layer
from snn.codegen.plan.space import (ACC_MAX, WS_ACC_MAX, WS_TC_MAX_1X1, WS_TILES_1X1, channel_candidates, space_arrays,
                                    tc_candidates, tile_candidates)
from snn.codegen.spec import ConvShape, load_spec

from plan_examples import CFG, SHAPE, SPECS


def all_shapes():
    return sorted({s for p in SPECS for s in load_spec(p).conv_shapes()})


def test_tile_candidates_keep_edge_waste_small():
    assert tile_candidates(7) == [1, 2, 4, 7]               # 3 would pad 7 to 9 (29 %)
    assert tile_candidates(14) == [1, 2, 3, 4, 5, 7, 8, 14]  # 6 would pad 14 to 18
    assert tc_candidates(3) == [3] and tc_candidates(96) == [4, 8, 16, 32, 64, 96]
    assert tc_candidates(2048)[-1] == 512
    assert (64, 1) in channel_candidates(64) and (128, 1) not in channel_candidates(64)
    assert (224, 1) in channel_candidates(896)  # 4 x 224 = 896: threads need not be a power of two


def test_space_covers_every_conv_of_every_network():
    shapes = all_shapes()
    kinds = {(s.R, s.S, s.stride, s.padding) for s in shapes}
    assert {(3, 3, (1, 1), (1, 1)), (3, 3, (2, 2), (1, 1)), (1, 1, (1, 1), (0, 0)), (1, 1, (2, 2), (0, 0)),
            (7, 7, (2, 2), (3, 3))} <= kinds
    for s in shapes:
        sp = space_arrays(s)  # the arrays behind config_space(s), checked all at once
        th, tw, tc, threads, nt, wh, ww = (sp[k] for k in ("th", "tw", "tc", "threads", "nt", "wh", "ww"))
        assert len(th) > 10, s.tag()
        assert ((threads >= 32) & (threads <= 256) & (threads % 32 == 0)).all()
        ws = wh * ww > 1  # warp-tiled: 32 threads a register tile, up to WS_ACC_MAX accumulators
        assert (th * tw * nt <= np.where(ws, WS_ACC_MAX, ACC_MAX)).all() and (threads[ws] == 32).all()
        assert not ws.any() or s.stride == (1, 1), s.tag()
        assert s.R * s.S > 1 or (tc[ws] <= WS_TC_MAX_1X1).all(), s.tag()
        bh, bw = th * wh, tw * ww
        assert (-(-s.P // bh) * bh <= 1.15 * s.P).all() and (-(-s.Q // bw) * bw <= 1.15 * s.Q).all()
        assert (-(-s.N // (threads * nt)) * threads * nt <= 1.125 * s.N).all()
        assert ((tc >= 1) & (tc <= s.C)).all()
        for g in known_gpus():  # and every GPU can run something
            assert explain_layer(s, load_gpu(g), 1, 0.5, top=1)["counts"]["stage3_timed"] >= 1
    space = config_space(SHAPE)
    assert len(space) == len(set(space)) == len(space_arrays(SHAPE)["th"]) and CFG in space


S14 = ConvShape(256, 256, 14, 14, 3, 3, (1, 1), (1, 1))


def test_planner_family_rules():
    gpu = load_gpu("h100")
    space = ws_space(S14)
    assert space and all(c.warp_tiled and c.threads == 32 and c.th * c.tw * c.nt <= WS_ACC_MAX for c in space)
    assert set(space) <= set(config_space(S14))
    one = ConvShape(1024, 256, 14, 14, 1, 1, (1, 1), (0, 0))                         # 1x1: one-row tiles, tc <= 128
    assert {(c.th, c.tw) for c in ws_space(one)} <= set(WS_TILES_1X1)
    assert max(c.tc for c in ws_space(one)) == WS_TC_MAX_1X1 < max(c.tc for c in ws_space(one, True))
    assert not ws_space(ConvShape(1024, 256, 14, 14, 1, 1, (2, 2), (0, 0)))    # stride 2: not measured
    assert not ws_space(ConvShape(128, 128, 28, 28, 3, 3, (2, 2), (1, 1)))      # stride 2: not measured
    assert not ws_space(ConvShape(3, 64, 224, 224, 7, 7, (2, 2), (3, 3)))
    # the "paper" / "pipes" models never see them; "snn" does at any batch, 1 included
    for model, batch in (("paper", 1), ("paper", 32), ("pipes", 32)):
        st = stages(S14, gpu, batch, 0.7, model)
        assert not any(c.warp_tiled for c in st["stage1"]), (model, batch)
    assert any(c.warp_tiled for c in stages(S14, gpu, 1, 0.7, "snn")["stage1"])
    st = stages(S14, gpu, 32, 0.7, "snn")
    # stage 2 ranks data movement within each family: warp-tiled blocks re-read weights less by design
    assert any(c.warp_tiled for c in st["stage2"]) and any(not c.warp_tiled for c in st["stage2"])
    pick = plan_shape(S14, gpu, 32, [0.7])[0.7].config
    assert pick.warp_tiled        # measured 0.79x the classic kernel's best at batch 32
    emit.render_sparse(S14, 32, pick)

"""The per-config geometry behind the "snn" model (codegen/plan/tables.py): counts against brute force and
worked examples."""
import math

import pytest

from snn.codegen.config import KernelConfig
from snn.codegen.plan import evaluate_config
from snn.codegen.plan.tables import axis_counts

from plan_examples import CFG, H100, ONE_BY_ONE, SHAPE


@pytest.mark.parametrize("n_out, n_in, t, stride, k, pad", [
    (56, 56, 4, 1, 3, 1), (56, 56, 3, 1, 3, 1), (28, 56, 5, 2, 3, 1), (112, 224, 4, 2, 7, 3), (7, 7, 4, 1, 1, 0),
    (28, 56, 3, 2, 1, 0)])
def test_axis_counts_match_brute_force(n_out, n_in, t, stride, k, pad):
    tiles = math.ceil(n_out / t)
    real_in = sum(1 for i in range(tiles) for x in range(i * t * stride - pad, i * t * stride - pad + (t - 1) * stride + k)
                  if 0 <= x < n_in)
    pairs = sum(1 for y in range(tiles * t) for r in range(k) if 0 <= y * stride - pad + r < n_in)
    useful = sum(1 for y in range(n_out) for r in range(k) if 0 <= y * stride - pad + r < n_in)
    assert axis_counts(n_out, n_in, t, stride, k, pad) == (tiles, real_in, pairs, useful)


def test_snn_counts_real_fmas_and_edge_waste():
    # 1x1, tiles 4x7 divide 56: FMAs = B*P*Q*N*C*rho = 2*56*56*64*64*0.5
    e = evaluate_config(ONE_BY_ONE, H100, 2, 0.5, KernelConfig(4, 7, 64, 64, 1))
    assert e["fmas"] == 2 * 56 * 56 * 64 * 64 * 0.5 and e["edge_waste"] == 0
    # 3x3 pad 1: along each axis 56 outputs x 3 taps minus the 2 that land in the padding = 166
    e = evaluate_config(SHAPE, H100, 2, 0.5, CFG)
    assert e["fmas"] == 2 * 128 * 64 * 0.5 * 166 * 166
    # th = 3 pads 56 rows to 57: the extra row's one real tap costs one more pair per column
    e = evaluate_config(SHAPE, H100, 2, 0.5, KernelConfig(3, 4, 16, 128, 1))
    assert e["fmas"] == 2 * 128 * 64 * 0.5 * 167 * 166 and e["edge_waste"] == pytest.approx(1 - 166 / 167)

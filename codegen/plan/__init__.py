"""Tile-size selection: the configuration space and the three-stage cost model (paper Sec. 3.5).

For one conv shape, GPU, batch and sparsity level:

  enumerate   space.py: the configs of each kernel family (register tile th x tw, channel tile tc,
              threads, nt; warp-tiled blocks of wh x ww warps), a short function, not a list;
              resources.py and tables.py: registers, shared memory and geometry of each
  stage 1     occupancy.py: drop what cannot launch, keep occupancy >= 50 % (the CUDA occupancy
              calculator's rules)
  stage 2     movement.py: keep the configs with the least data movement (Table 2, in bytes, times the batch)
  stage 3     models/: predict the time (waves, Eqs. 3-9), one module per model, and take the minimum

planner.py drives the stages per shape and level and returns a Plan; explain.py says how the stages went.
Three stage-3 models share stages 1-2: "snn" (default, fitted to H100 measurements), "pipes" (the "snn"
model before the fit) and "paper" (the paper's equations with the known slips fixed). docs/costmodel.md
describes them and every departure from the paper. Levels are *sparsity* (fraction of zeros) s; the
paper's rho is the density 1 - s.
"""
from .explain import explain_layer, explain_plan, format_explain, format_plan
from .models import MODELS
from .planner import (DEFAULT_LEVELS, Choice, LayerPlan, Plan, clear_caches, data_movement, evaluate_config,
                      parse_levels, plan_network, plan_shape, stages)
from .resources import estimate_resources
from .space import config_space, pads_within, ws_space

__all__ = [
    "DEFAULT_LEVELS", "MODELS", "Choice", "LayerPlan", "Plan", "clear_caches", "config_space", "data_movement",
    "estimate_resources", "evaluate_config", "explain_layer", "explain_plan", "format_explain", "format_plan",
    "pads_within", "parse_levels", "plan_network", "plan_shape", "stages", "ws_space",
]

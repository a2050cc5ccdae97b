"""Closed loop of a checkpoint with the planning prompt's lateral velocity and acceleration written
as 0.00 at inference (issue 19 run record; not part of the package).

    python docs/runs/recovery_issue19/cl_status_zeroed.py CKPT zero|keep [SCENARIOS [EPISODES]]
"""
import dataclasses, sys, time
from wamdiff2_core.sim.closed_loop import ClosedLoopConfig, run_closed_loop
from wamdiff2_core.sim.planners import checkpoint_planner
from wamdiff2_core.evaluation.closed_loop_report import build_report, format_text

ckpt, zero = sys.argv[1], sys.argv[2] == "zero"
scen = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else None
eps = int(sys.argv[4]) if len(sys.argv) > 4 else 6
inner = checkpoint_planner(ckpt)
def plan(obs, image):
    if zero:
        obs = dataclasses.replace(obs, velocity=(obs.velocity[0], 0.0),
                                  acceleration=(obs.acceleration[0], 0.0))
    return inner(obs, image)
kw = {"scenarios": scen} if scen else {}
cfg = ClosedLoopConfig(episodes=eps, seed=2000, **kw)
t = time.time()
res = run_closed_loop(plan, cfg, progress=False)
print(format_text(build_report(res, ckpt, cfg, time.time() - t)))

"""wamdiff2_core.sim: highway-env world, Panda3D front camera, expert driver, ground truth,
data generator (``wamdiff2 data generate``) and closed-loop runner (``wamdiff2 eval
closed-loop``). See docs/simulation.md."""

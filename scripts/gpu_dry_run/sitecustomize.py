"""The CPU dry run of scripts/gpu_check.sh imports as a lent GPU machine does: that machine's
image has no ROS, simulator or bag packages and none of them travel (docs/decoding.md, "On a
GPU"), so here they are hidden too (``None`` in ``sys.modules``: importing one raises
ModuleNotFoundError and ``importlib.util.find_spec`` finds nothing). A step that starts to
need one fails the dry run in CI instead of the device run. Python imports this module at
start-up because the dry run puts this folder first on PYTHONPATH."""
import sys

NOT_ON_THE_DEVICE = ("rclpy", "rcl_interfaces", "highway_env", "gymnasium", "pygame", "panda3d",
                     "rosbags", "faster_coco_eval")
for _name in NOT_ON_THE_DEVICE:
    sys.modules[_name] = None

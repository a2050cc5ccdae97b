"""Launch the wamdiff2 planning node.

    ros2 launch wamdiff2_ros wamdiff2.launch.py \
        camera_topic:=/front_camera/image_raw odometry_topic:=/odom \
        [params_file:=my.yaml] [checkpoint:=/path/to/ckpt] [namespace:=ego]

`camera_topic` is remapped onto ~/input/image, and `<camera_topic>/compressed` onto
~/input/image/compressed (which one the node reads is the `image_transport` parameter).
The node is a lifecycle node that configures and activates itself (`autostart: true` in the
params file); with `autostart: false`, drive it with `ros2 lifecycle set`.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "wamdiff2_ros"


def _planner_node(context):
    """The node action; `checkpoint` overrides the params file only when it is given."""
    parameters = [LaunchConfiguration("params_file").perform(context),
                  {"use_sim_time": LaunchConfiguration("use_sim_time").perform(context)
                   .lower() in ("true", "1")}]
    checkpoint = LaunchConfiguration("checkpoint").perform(context)
    if checkpoint:
        parameters.append({"checkpoint": checkpoint})
    camera = LaunchConfiguration("camera_topic").perform(context)
    remappings = [
        ("~/input/image", camera),
        ("~/input/image/compressed", camera.rstrip("/") + "/compressed"),
        ("~/input/odometry", LaunchConfiguration("odometry_topic").perform(context)),
    ]
    return [Node(
        package=PACKAGE,
        executable="planner_node",
        name="wamdiff2_planner",
        namespace=LaunchConfiguration("namespace"),
        parameters=parameters,
        remappings=remappings,
        output="screen",
        emulate_tty=True,
    )]


def generate_launch_description():
    default_params = os.path.join(get_package_share_directory(PACKAGE), "config",
                                  "wamdiff2.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="Node parameters (wamdiff2_planner: "
                                          "ros__parameters:)"),
        DeclareLaunchArgument("checkpoint", default_value="",
                              description="Checkpoint directory or preset; empty: the params "
                                          "file's value (there, empty = the bundled model)"),
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of the node and its topics"),
        DeclareLaunchArgument("camera_topic", default_value="/camera/image_raw",
                              description="Camera topic remapped onto ~/input/image "
                                          "(+ /compressed onto ~/input/image/compressed)"),
        DeclareLaunchArgument("odometry_topic", default_value="/odom",
                              description="nav_msgs/Odometry topic remapped onto "
                                          "~/input/odometry"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Use /clock (simulation or bag replay)"),
        OpaqueFunction(function=_planner_node),
    ])

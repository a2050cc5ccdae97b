"""Launch the wamdiff2 planning node.

    ros2 launch wamdiff2_ros wamdiff2.launch.py \
        camera_topic:=/front_camera/image_raw odometry_topic:=/odom \
        [camera_topics:="front:=/cam_f/image_raw,left:=/cam_l/image_raw"] \
        [params_file:=my.yaml] [checkpoint:=/path/to/ckpt] [namespace:=ego] \
        [command_topic:=/route/command] [path_topic:=/planning/path] ... \
        [use_sim_time:=true] [log_level:=debug] [dds_profile:=/path/profile.xml]

Every topic of the node can be remapped: `camera_topic` onto ~/input/image (and
`<camera_topic>/compressed` onto ~/input/image/compressed: which one the node reads is the
`image_transport` parameter), the others (REMAPS below) only when given. `camera_topics`
names several cameras, each with its topic: it sets the node's `cameras` parameter to those
names, in that order (they must be the model's cameras), and remaps each onto
~/input/<name>/image (+ /compressed); it replaces `camera_topic`. The params file is
keyed `/**`, so it applies under any namespace. The node is a lifecycle node that configures
and activates itself (`autostart: true`); with `autostart: false`, drive it with
`ros2 lifecycle set`. DDS: the node gets the package's Fast DDS profile
(config/fastdds_node.xml: best-effort full-size frames arrive) only where the environment has
no DDS setting of its own, so that it joins the graph as its peers do
(wamdiff2_ros/node/dds.py); `dds_profile` names a profile file to use whatever the
environment says.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from wamdiff2_ros.node import dds
from wamdiff2_ros.node.topics import parse_camera_topics

PACKAGE = "wamdiff2_ros"
NODE_NAME = "wamdiff2_planner"

# launch argument -> the node's topic it remaps (when the argument is not empty)
REMAPS = {
    "odometry_topic": "~/input/odometry",
    "command_topic": "~/input/command",
    "question_topic": "~/input/question",
    "path_topic": "~/output/path",
    "markers_topic": "~/output/markers",
    "detections_topic": "~/output/detections",
    "answer_topic": "~/output/answer",
    "status_topic": "~/output/status",
    "stats_topic": "~/output/stats",
}
CAMERA_REMAPS = ("~/input/image", "~/input/image/compressed")


def _is_true(text: str) -> bool:
    return text.strip().lower() in ("true", "1", "yes")


def camera_remaps(camera_topics: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The camera names and remaps of `camera_topics` ("front:=/a,left:=/b"): one camera
    onto ~/input/image, several onto ~/input/<name>/image (each + /compressed). ValueError
    (one sentence) for an item that is not NAME:=TOPIC or a name given twice."""
    pairs = parse_camera_topics(camera_topics)
    remaps = []
    for name, topic in pairs:
        inputs = CAMERA_REMAPS if len(pairs) == 1 else (f"~/input/{name}/image",
                                                        f"~/input/{name}/image/compressed")
        remaps += [(inputs[0], topic), (inputs[1], topic.rstrip("/") + "/compressed")]
    return [name for name, _ in pairs], remaps


def _planner_node(context):
    """The node action; `checkpoint` overrides the params file only when it is given."""
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    parameters = [arg("params_file"), {"use_sim_time": _is_true(arg("use_sim_time"))}]
    if arg("checkpoint"):
        parameters.append({"checkpoint": arg("checkpoint")})
    camera = arg("camera_topic")
    remappings = []
    if arg("camera_topics").strip():
        names, remappings = camera_remaps(arg("camera_topics"))
        parameters.append({"cameras": names})
    elif camera:
        remappings += [(CAMERA_REMAPS[0], camera),
                       (CAMERA_REMAPS[1], camera.rstrip("/") + "/compressed")]
    remappings += [(topic, arg(name)) for name, topic in REMAPS.items() if arg(name)]
    profile = arg("dds_profile")
    if profile:
        dds_env = {dds.PROFILE_VARIABLE: profile}
    else:
        share = get_package_share_directory(PACKAGE)
        dds_env = dds.node_environment(os.environ,
                                       os.path.join(share, "config", dds.PROFILE_FILE))
    # the node's own logger (`ego.wamdiff2_planner` under namespace ego), not rcl's and DDS's
    logger = ".".join([*arg("namespace").strip("/").split("/"), NODE_NAME]).lstrip(".")
    return [Node(
        package=PACKAGE,
        executable="planner_node",
        name=NODE_NAME,
        namespace=arg("namespace"),
        parameters=parameters,
        remappings=remappings,
        ros_arguments=["--log-level", f"{logger}:={arg('log_level')}"],
        additional_env=dds_env or None,
        output="screen",
        emulate_tty=True,
    )]


def generate_launch_description():
    share = get_package_share_directory(PACKAGE)
    default_params = os.path.join(share, "config", "wamdiff2.yaml")
    topic_arguments = [
        DeclareLaunchArgument(name, default_value="",
                              description=f"Topic remapped onto {topic} (empty: not remapped)")
        for name, topic in REMAPS.items() if name != "odometry_topic"]
    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="Node parameters (a file keyed /**: "
                                          "ros__parameters:)"),
        DeclareLaunchArgument("checkpoint", default_value="",
                              description="Checkpoint directory or preset; empty: the params "
                                          "file's value (there, empty = the bundled model)"),
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of the node and its topics"),
        DeclareLaunchArgument("camera_topic", default_value="/camera/image_raw",
                              description="Camera topic remapped onto ~/input/image "
                                          "(+ /compressed onto ~/input/image/compressed); "
                                          "empty: not remapped"),
        DeclareLaunchArgument("camera_topics", default_value="",
                              description="Several cameras: NAME:=TOPIC,NAME:=TOPIC (the "
                                          "model's cameras, in its order); sets the cameras "
                                          "parameter and remaps each onto "
                                          "~/input/<name>/image (+ /compressed); replaces "
                                          "camera_topic; empty: camera_topic"),
        DeclareLaunchArgument("odometry_topic", default_value="/odom",
                              description="nav_msgs/Odometry topic remapped onto "
                                          "~/input/odometry; empty: not remapped"),
        *topic_arguments,
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Use /clock (simulation or bag replay --clock)"),
        DeclareLaunchArgument("log_level", default_value="info",
                              description="The node's log level: debug | info | warn | error "
                                          "| fatal"),
        DeclareLaunchArgument("dds_profile", default_value="",
                              description="Fast DDS XML profile file of the node; empty: "
                                          "config/fastdds_node.xml where the environment "
                                          "has no DDS setting of its own (RMW_IMPLEMENTATION, "
                                          "FASTRTPS_DEFAULT_PROFILES_FILE, "
                                          "FASTDDS_DEFAULT_PROFILES_FILE, "
                                          "FASTDDS_BUILTIN_TRANSPORTS), else that setting"),
        OpaqueFunction(function=_planner_node),
    ])

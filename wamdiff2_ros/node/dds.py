"""The node's DDS setting: the package's Fast DDS profile, or the environment's own.

The package's profile (config/fastdds_node.xml: UDP only, 8 MB socket buffers) is what lets
best-effort full-size camera frames and small odometry messages arrive on time (docs/ros.md,
"DDS setting"). It is also a transport choice, and two participants whose transports differ
may never discover each other: a node under the profile is invisible to a peer under
``FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA``. So the launch file and the tools that start the
node give it the profile only where the environment has no DDS setting of its own: another
RMW, a profile file named in either of Fast DDS's variables (an empty value included: a
choice of Fast DDS's defaults) or builtin transports. This module is plain Python: the
launch file imports it too.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

FAST_DDS = "rmw_fastrtps_cpp"
#: Fast DDS's own variables; the first is the one set to give the node the package's profile.
FAST_DDS_VARIABLES = ("FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE",
                      "FASTDDS_BUILTIN_TRANSPORTS")
PROFILE_VARIABLE = FAST_DDS_VARIABLES[0]
PROFILE_FILE = "fastdds_node.xml"          # in the package's config/


def rmw(environ: Mapping[str, str]) -> str:
    """The RMW implementation `environ` selects (Fast DDS when it names none)."""
    return environ.get("RMW_IMPLEMENTATION") or FAST_DDS


def own_setting(environ: Mapping[str, str]) -> dict[str, str]:
    """The DDS setting `environ` makes itself (variable -> value; empty: none): another RMW,
    or any of Fast DDS's variables, an empty value included."""
    if rmw(environ) != FAST_DDS:
        return {"RMW_IMPLEMENTATION": environ["RMW_IMPLEMENTATION"]}
    return {v: environ[v] for v in FAST_DDS_VARIABLES if v in environ}


def node_environment(environ: Mapping[str, str], profile: str | Path) -> dict[str, str]:
    """What to add to `environ` for the node: the package's `profile` where `environ` has no
    DDS setting of its own, else nothing (the node joins the graph as its peers do)."""
    return {} if own_setting(environ) else {PROFILE_VARIABLE: str(profile)}


def package_profile(environ: Mapping[str, str]) -> bool:
    """Whether `environ` runs the node under the package's profile (and nothing else): the
    setting under which a best-effort subscription gets every full-size camera frame."""
    setting = own_setting(environ)
    return set(setting) == {PROFILE_VARIABLE} and \
        Path(setting[PROFILE_VARIABLE]).name == PROFILE_FILE


def describe(environ: Mapping[str, str]) -> str:
    """The node's DDS setting under `environ`, in words (its start-up line, /diagnostics)."""
    setting = own_setting(environ)
    if not setting:
        return f"{FAST_DDS} with Fast DDS's defaults"
    named = ", ".join(f"{k}={v or repr('')}" for k, v in setting.items())
    if package_profile(environ):
        return f"{rmw(environ)} with the package's profile ({named})"
    return f"{rmw(environ)} with the environment's own setting ({named})"


def defaults_warning(environ: Mapping[str, str]) -> str | None:
    """A warning for a node under Fast DDS's defaults with nothing chosen, else None: there,
    on a machine whose cores are busy planning, its odometry came in hundreds of ms late and
    frames fell back on stale odometry (docs/ros.md, "DDS setting")."""
    if own_setting(environ):
        return None
    return ("running under Fast DDS's defaults: on a busy machine small messages such as "
            f"odometry can arrive hundreds of ms late (stale-odometry fallbacks); set "
            f"{PROFILE_VARIABLE} to the package's config/{PROFILE_FILE}, as the launch file "
            "does where the environment has no DDS setting of its own (docs/ros.md, \"DDS "
            "setting\")")

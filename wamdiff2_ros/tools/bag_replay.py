"""``wamdiff2 bag replay``: a bag's messages into the live ROS graph at recorded timing.

Messages are published as the recorded CDR bytes (`Publisher.publish(bytes)`), never
re-serialised. Publishers are reliable (they serve reliable and best-effort subscribers
alike, and large frames arrive with this DDS) and keep a topic's recorded
transient-local durability. Before the first message the whole selection is checked as
`bag eval` checks what it reads (`bag_frames.check_bag`, one definition): every topic exists
and its type is installed, every message deserializes, a topic named as a camera carries
images, camera stamps strictly increase and other header stamps never go backwards (each a
BagError); a camera message the node would drop (garbage or short image data ...) is
skipped and counted. `as_is` (`--as-is`) publishes the bag as it is, unchecked, for testing
a node with bad data. With
`clock_hz` (`--clock`) the replay also publishes the bag's time on /clock (rosgraph_msgs/
Clock, at that rate and before every message, scaled like the messages), so nodes with
`use_sim_time` run on bag time; a loop starts the clock again at the bag's start.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosbags.interfaces import QosDurability

from wamdiff2_ros.node.bad_input import BadInput
from wamdiff2_ros.tools.bag_frames import check_bag, check_camera_names
from wamdiff2_ros.tools.bag_io import BagError, BagReader, TopicInfo, message_class

DEFAULT_DEPTH = 10


@dataclass(frozen=True)
class ReplayConfig:
    """What to replay and how."""

    bag: Path
    rate: float = 1.0                              # 2.0: twice as fast
    topics: tuple[str, ...] | None = None          # bag topic names; None: all
    remaps: dict[str, str] = field(default_factory=dict)   # bag topic -> published name
    loop: bool = False
    delay_s: float = 0.0                           # pause after the publishers exist
    clock_hz: float = 0.0                          # /clock publications a second; 0: none
    as_is: bool = False                            # publish unchecked (bad data included)
    latched: tuple[str, ...] = ()                  # bag topics published transient local

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"rate must be positive, got {self.rate}")
        if self.delay_s < 0:
            raise ValueError(f"delay must be >= 0, got {self.delay_s}")
        if not 0 <= self.clock_hz <= 1000:
            raise ValueError(f"clock must be 0..1000 Hz, got {self.clock_hz}")


@dataclass
class ReplayProgress:
    """Where a replay is (passed to the progress callback and returned at the end)."""

    messages: int = 0
    bag_elapsed_s: float = 0.0
    bag_duration_s: float = 0.0
    loops: int = 0
    interrupted: bool = False
    skipped: Counter = field(default_factory=Counter)   # BadInput kind -> messages skipped

    def line(self, rate: float) -> str:
        pct = 100.0 * self.bag_elapsed_s / self.bag_duration_s if self.bag_duration_s else 100.0
        loop = f"  loop {self.loops + 1}" if self.loops else ""
        skipped = f"  {sum(self.skipped.values())} skipped" if self.skipped else ""
        return (f"[replay] {self.bag_elapsed_s:7.2f} / {self.bag_duration_s:.2f} s "
                f"({pct:5.1f}%)  {self.messages} msgs{skipped}  x{rate:g}{loop}")


def progress_printer(rate: float, stream=None, every_s: float = 5.0
                     ) -> Callable[[ReplayProgress], None]:
    """A progress callback: one line rewritten in place on a terminal, else a line every
    `every_s` seconds of bag time (and at the end)."""
    import sys

    stream = stream or sys.stderr
    tty = stream.isatty()
    last = [-every_s]

    def show(state: ReplayProgress) -> None:
        if tty:
            print("\r" + state.line(rate), end="", file=stream, flush=True)
        elif state.bag_elapsed_s - last[0] >= every_s or \
                state.bag_elapsed_s >= state.bag_duration_s:
            if state.bag_elapsed_s != last[0]:
                print(state.line(rate), file=stream, flush=True)
            last[0] = state.bag_elapsed_s
    show.tty = tty
    return show


def publisher_qos(info: TopicInfo, latched: bool = False) -> QoSProfile:
    """Reliable, keep last (the recorded depth, at least DEFAULT_DEPTH), and transient-local
    where the recording offered it or `latched` asks for it (a transient-local publisher
    serves volatile and transient-local subscriptions alike, without a QoS warning)."""
    transient = latched or any(q.durability == QosDurability.TRANSIENT_LOCAL
                               for q in info.qos)
    depth = max([DEFAULT_DEPTH] + [int(q.depth) for q in info.qos if q.depth])
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE,
                      durability=(DurabilityPolicy.TRANSIENT_LOCAL if transient
                                  else DurabilityPolicy.VOLATILE))


OnPublish = Callable[[str, int, bytes, float], None]   # (bag topic, log ns, raw, monotonic)


class BagPlayer:
    """Publishers for a bag's selected topics on `node`, and the timed loop feeding them.

    Construction validates the bag (BagError on a missing topic or an uninstalled type,
    and unless `config.as_is` what `bag_frames.check_bag` refuses) and creates the
    publishers; `play` publishes, skipping the camera messages in `unusable`.
    """

    def __init__(self, node, bag: BagReader, config: ReplayConfig,
                 on_publish: OnPublish | None = None):
        self.node, self.bag, self.config = node, bag, config
        self._on_publish = on_publish
        names = list(bag.topics) if config.topics is None else list(config.topics)
        for name in names:
            bag.require_topic(name)
        unknown = sorted(set(config.remaps) - set(names))
        if unknown:
            raise BagError(f"--remap names topics that are not replayed: {', '.join(unknown)}")
        unknown = sorted(set(config.latched) - set(names))
        if unknown:
            raise BagError(f"--latched names topics that are not replayed: "
                           f"{', '.join(unknown)}")
        classes = {n: message_class(bag.topics[n].msgtype, n) for n in names}
        self.unusable: dict[tuple[str, int], BadInput] = {}
        if not config.as_is:
            cameras = check_camera_names(bag, {n: config.remaps.get(n, n) for n in names})
            self.unusable = check_bag(bag, names, cameras, ordered=names, images=True)
        self.topics = names
        self.publishers = {}
        for name in names:
            target = config.remaps.get(name, name)
            profile = publisher_qos(bag.topics[name], name in config.latched)
            self.publishers[name] = node.create_publisher(classes[name], target, profile)
        self._clock = None
        if config.clock_hz > 0:
            from rosgraph_msgs.msg import Clock

            self._clock_msg = Clock()
            self._clock = node.create_publisher(Clock, "/clock", QoSProfile(
                history=HistoryPolicy.KEEP_LAST, depth=1,
                reliability=ReliabilityPolicy.RELIABLE))

    def _publish_clock(self, bag_ns: int) -> None:
        self._clock_msg.clock.sec, self._clock_msg.clock.nanosec = divmod(int(bag_ns),
                                                                           1_000_000_000)
        self._clock.publish(self._clock_msg)

    def published_name(self, topic: str) -> str:
        """The name `topic` is published under (after remapping)."""
        return self.publishers[topic].topic_name

    def wait_for_subscribers(self, topics: list[str], timeout_s: float,
                             stop: threading.Event | None = None) -> list[str]:
        """Wait until each bag topic in `topics` has a subscriber; the ones still without
        one after `timeout_s` (empty: all matched)."""
        deadline = time.monotonic() + timeout_s
        while True:
            missing = [t for t in topics if self.publishers[t].get_subscription_count() == 0]
            if not missing or time.monotonic() >= deadline or (stop and stop.is_set()):
                return missing
            time.sleep(0.05)

    def play(self, progress: Callable[[ReplayProgress], None] | None = None,
             stop: threading.Event | None = None, progress_period_s: float = 0.2,
             flush: bool = True) -> ReplayProgress:
        """Publish at recorded timing (scaled by the rate), once or in a loop, until done,
        `stop` is set or KeyboardInterrupt (then `interrupted` is True; never raises it).
        `flush`: then wait for the subscribers' acknowledgements (see `flush`)."""
        state = ReplayProgress(bag_duration_s=max(0, self.bag.end_ns - self.bag.start_ns
                                                  - 1) * 1e-9)
        stop = stop or threading.Event()
        last_report = 0.0
        try:
            if self.config.delay_s and stop.wait(self.config.delay_s):
                return state
            clock_period = 1.0 / self.config.clock_hz if self._clock is not None else None
            while not stop.is_set():
                start_wall, first_ns, next_clock = time.monotonic(), None, 0.0
                index: Counter = Counter()
                for topic, _, log_ns, raw in self.bag.messages(self.topics):
                    first_ns = log_ns if first_ns is None else first_ns
                    index[topic] += 1
                    bad = self.unusable.get((topic, index[topic] - 1))
                    if bad is not None:
                        state.skipped[bad.kind] += 1
                        continue
                    target = start_wall + (log_ns - first_ns) * 1e-9 / self.config.rate
                    while not stop.is_set():
                        now = time.monotonic()
                        if progress and now - last_report >= progress_period_s:
                            state.bag_elapsed_s = min(state.bag_duration_s, (
                                now - start_wall) * self.config.rate)
                            progress(state)
                            last_report = now
                        if clock_period is not None and now >= next_clock:
                            self._publish_clock(min(log_ns, first_ns + (
                                now - start_wall) * self.config.rate * 1e9))
                            next_clock = now + clock_period
                        if now >= target:
                            break
                        wake = target if clock_period is None else min(target, next_clock)
                        time.sleep(max(0.0, min(0.05, wake - now)))
                    if stop.is_set():
                        break
                    if clock_period is not None:
                        self._publish_clock(log_ns)        # never behind the message's time
                    self.publishers[topic].publish(raw)
                    state.messages += 1
                    state.bag_elapsed_s = (log_ns - first_ns) * 1e-9
                    if self._on_publish is not None:
                        self._on_publish(topic, log_ns, raw, time.monotonic())
                if not self.config.loop or stop.is_set():
                    break
                state.loops += 1
            if flush:
                self.flush()
        except KeyboardInterrupt:
            state.interrupted = True
        if progress:
            progress(state)
        return state

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait (at most `timeout_s` in all) until the subscribers have acknowledged what was
        published: a process that exits right after its last publish loses it otherwise.
        Acknowledgements follow DDS heartbeats (seconds apart), and rclpy holds the GIL
        meanwhile: a process that goes on receiving should not flush."""
        from rclpy.duration import Duration

        deadline = time.monotonic() + timeout_s
        done = True
        for pub in self.publishers.values():
            left = max(0.0, deadline - time.monotonic())
            done &= pub.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9)))
        return done

    def close(self) -> None:
        for pub in self.publishers.values():
            self.node.destroy_publisher(pub)
        self.publishers = {}
        if self._clock is not None:
            self.node.destroy_publisher(self._clock)
            self._clock = None


def make_player(node, bag: BagReader, config: ReplayConfig,
                on_publish: OnPublish | None = None) -> BagPlayer:
    """A BagPlayer; rclpy's errors (an invalid remapped name) become BagError."""
    try:
        return BagPlayer(node, bag, config, on_publish)
    except BagError:
        raise
    except Exception as exc:  # noqa: BLE001 - rclpy raises several exception types here
        raise BagError(f"cannot create the publishers: {exc}") from None


def parse_remaps(items: list[str] | None) -> dict[str, str]:
    """``["a:=b", ...]`` -> {"a": "b"}; ValueError naming a malformed item."""
    out = {}
    for item in items or []:
        src, sep, dst = item.partition(":=")
        if not sep or not src.strip() or not dst.strip():
            raise ValueError(f"--remap {item!r} is not FROM:=TO")
        out[src.strip()] = dst.strip()
    return out


def replay(config: ReplayConfig, domain_id: int | None = None, wait_for: tuple[str, ...] = (),
           wait_timeout_s: float = 30.0, progress: Callable[[ReplayProgress], None] | None = None
           ) -> ReplayProgress:
    """Open the bag, start a node of our own and play (see BagPlayer); Ctrl-C stops cleanly.

    `wait_for`: bag topics that must have a subscriber before the first message (BagError
    if one still has none after `wait_timeout_s`).
    """
    import os

    import rclpy
    from rclpy.context import Context

    with BagReader(config.bag) as bag:
        context = Context()
        rclpy.init(args=[], context=context, domain_id=domain_id)
        node = None
        try:
            node = rclpy.create_node(f"wamdiff2_bag_replay_{os.getpid()}", context=context)
            player = make_player(node, bag, config)
            try:
                if wait_for:
                    for topic in wait_for:
                        if topic not in player.publishers:
                            raise BagError(f"--wait-for {topic}: not a replayed topic")
                    missing = player.wait_for_subscribers(list(wait_for), wait_timeout_s)
                    if missing:
                        names = ", ".join(player.published_name(t) for t in missing)
                        raise BagError(f"no subscriber on {names} after {wait_timeout_s:g} s")
            except KeyboardInterrupt:
                return ReplayProgress(interrupted=True)
            result = player.play(progress)
            player.close()
            return result
        finally:
            if node is not None:
                node.destroy_node()
            rclpy.try_shutdown(context=context)

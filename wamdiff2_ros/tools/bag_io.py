"""Reading and writing ROS 2 bags with `rosbags`: every failure is one `BagError` sentence.

A bag is a rosbag2 directory (``metadata.yaml`` + storage file) or a bare ``.mcap`` /
``.db3`` storage file. Messages stay serialized (CDR bytes) here: readers hand out raw
bytes, writers take raw bytes, so replaying or copying never re-serialises. `BagWriter`
writes to a temporary path next to its output and moves the finished bag there only on
success, so a failed or interrupted run leaves nothing at the output path.
"""
from __future__ import annotations

import functools
import importlib
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from rosbags.highlevel import AnyReader
from rosbags.interfaces import (Qos, QosDurability, QosHistory, QosLiveliness, QosReliability,
                                QosTime)
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

FORMATS: dict[str, StoragePlugin] = {"mcap": StoragePlugin.MCAP,
                                     "sqlite3": StoragePlugin.SQLITE3}
FILE_SUFFIXES: dict[str, str] = {".mcap": "mcap", ".db3": "sqlite3"}
HEADER_TYPE = "std_msgs/msg/Header"
_INFINITE = QosTime(sec=2147483647, nsec=4294967295)   # rosbag2's "no deadline/lifespan"


class BagError(Exception):
    """A bag that cannot be used, or an output that cannot be written: one sentence."""


@functools.lru_cache(maxsize=1)
def jazzy_typestore():
    """rosbags' ROS 2 Jazzy type store (matches the rclpy messages installed here)."""
    return get_typestore(Stores.ROS2_JAZZY)


def qos_profile(reliable: bool = True, depth: int = 10, transient_local: bool = False) -> Qos:
    """A QoS profile as rosbag2 stores it in a bag's metadata (offered_qos_profiles)."""
    return Qos(history=QosHistory.KEEP_LAST, depth=depth,
               reliability=QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
               durability=(QosDurability.TRANSIENT_LOCAL if transient_local
                           else QosDurability.VOLATILE),
               deadline=_INFINITE, lifespan=_INFINITE, liveliness=QosLiveliness.AUTOMATIC,
               liveliness_lease_duration=_INFINITE, avoid_ros_namespace_conventions=False)


# ------------------------------------------------------------------------------ reading
@dataclass(frozen=True)
class TopicInfo:
    """One topic of a bag."""

    name: str
    msgtype: str                 # e.g. sensor_msgs/msg/Image
    count: int
    qos: tuple[Qos, ...]         # offered QoS profiles recorded with it (may be empty)
    has_header: bool             # the message starts with a std_msgs/Header


def _describe(path: Path, exc: BaseException) -> str:
    reason = str(exc).strip() or type(exc).__name__
    return (f"cannot read bag {path}: it is truncated, corrupt or not a ROS 2 bag "
            f"({reason.rstrip('.')})")


class BagReader:
    """A bag opened for reading (context manager); every reading error is a BagError."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.exists():
            raise BagError(f"bag {self.path} does not exist")
        if self.path.is_file() and self.path.suffix not in FILE_SUFFIXES:
            raise BagError(f"{self.path} is not a bag: expected a rosbag2 directory or a "
                           f"{' or '.join(FILE_SUFFIXES)} file")
        try:
            self._reader = AnyReader([self.path], default_typestore=jazzy_typestore())
            self._reader.open()
        except BagError:
            raise
        except Exception as exc:  # noqa: BLE001 - rosbags, sqlite and OS errors alike
            raise BagError(_describe(self.path, exc)) from None
        fielddefs = self._reader.typestore.fielddefs
        by_topic: dict[str, list] = {}
        for conn in self._reader.connections:
            by_topic.setdefault(conn.topic, []).append(conn)
        self.topics: dict[str, TopicInfo] = {}
        for name, conns in sorted(by_topic.items()):
            types = {c.msgtype for c in conns}
            if len(types) > 1:
                raise BagError(f"bag {self.path}: topic {name} carries several message "
                               f"types ({', '.join(sorted(types))})")
            msgtype = types.pop()
            fields = fielddefs.get(msgtype, ((), ()))[1]
            has_header = bool(fields) and fields[0][1][1:] == (HEADER_TYPE,)
            qos = tuple(q for c in conns for q in (getattr(c.ext, "offered_qos_profiles",
                                                           None) or ()))
            self.topics[name] = TopicInfo(name, msgtype, sum(c.msgcount for c in conns), qos,
                                          has_header)
        self._connections = {name: conns for name, conns in by_topic.items()}

    def __enter__(self) -> BagReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._reader.close()
        except Exception:  # noqa: BLE001 - closing a broken bag must not mask the error
            pass

    @property
    def start_ns(self) -> int:
        return int(self._reader.start_time)

    @property
    def end_ns(self) -> int:
        return int(self._reader.end_time)

    def topics_of_type(self, *msgtypes: str) -> list[str]:
        """Names of the topics whose type is one of `msgtypes`, sorted."""
        return [t.name for t in self.topics.values() if t.msgtype in msgtypes]

    def require_topic(self, name: str, *msgtypes: str) -> TopicInfo:
        """The topic `name`; BagError if it is missing or (when given) of another type."""
        info = self.topics.get(name)
        if info is None:
            listing = ", ".join(f"{t.name} ({t.msgtype})" for t in self.topics.values())
            raise BagError(f"bag {self.path} has no topic {name} (topics: {listing or 'none'})")
        if msgtypes and info.msgtype not in msgtypes:
            raise BagError(f"topic {name} in {self.path} has message type {info.msgtype}, "
                           f"expected {' or '.join(msgtypes)}")
        return info

    def messages(self, topics: Iterable[str] | None = None
                 ) -> Iterator[tuple[str, str, int, bytes]]:
        """(topic, msgtype, log time ns, CDR bytes) in log-time order, for `topics` (all)."""
        names = list(self.topics) if topics is None else list(topics)
        conns = [c for name in names for c in self._connections.get(name, [])]
        if not conns:
            return
        try:
            for conn, log_ns, raw in self._reader.messages(connections=conns):
                yield conn.topic, conn.msgtype, int(log_ns), bytes(raw)
        except Exception as exc:  # noqa: BLE001 - a corrupt chunk shows up only here
            raise BagError(_describe(self.path, exc)) from None

    def check_stamps(self, topics: Iterable[str], strict: Iterable[str] = ()) -> None:
        """BagError unless each topic's header stamps never decrease (in `strict` topics:
        always increase). Topics without a header are skipped."""
        strict = set(strict)
        checked = [t for t in topics if self.topics.get(t) and self.topics[t].has_header]
        last: dict[str, tuple[int, int]] = {}
        count: dict[str, int] = {}
        for topic, _, _, raw in self.messages(checked):
            index = count.get(topic, 0)
            count[topic] = index + 1
            stamp = header_stamp_ns(raw)
            previous = last.get(topic)
            if previous is not None and (stamp < previous[1] or
                                         (topic in strict and stamp == previous[1])):
                raise BagError(
                    f"non-monotonic stamps on {topic} in {self.path}: message {index} is "
                    f"stamped {stamp * 1e-9:.9f} s, "
                    f"{'not after' if stamp == previous[1] else 'before'} message "
                    f"{previous[0]} at {previous[1] * 1e-9:.9f} s")
            last[topic] = (index, stamp)


def header_stamp_ns(raw: bytes) -> int:
    """header.stamp (ns) of a CDR message that starts with a std_msgs/Header."""
    if len(raw) < 12:
        raise BagError(f"a message of {len(raw)} bytes is too short to hold a header")
    order = "<" if raw[1] == 1 else ">"          # encapsulation: CDR_LE = 0x0001
    sec, nanosec = struct.unpack_from(order + "iI", raw, 4)
    return sec * 1_000_000_000 + nanosec


def canonical_cdr(raw: bytes, msgtype: str) -> bytes:
    """The same message re-encoded by rosbags: identical values, but alignment padding is
    zeroed (rclpy leaves whatever was in memory there), so equal messages give equal bytes."""
    store = jazzy_typestore()
    return bytes(store.serialize_cdr(store.deserialize_cdr(raw, msgtype), msgtype))


def message_class(msgtype: str, topic: str | None = None):
    """The rclpy message class of `msgtype` (e.g. sensor_msgs/msg/Image); BagError if this
    ROS 2 installation does not have it."""
    parts = msgtype.split("/")
    where = f" on topic {topic}" if topic else ""
    if len(parts) != 3 or parts[1] != "msg":
        raise BagError(f"unknown message type {msgtype!r}{where} (expected package/msg/Name)")
    try:
        return getattr(importlib.import_module(f"{parts[0]}.msg"), parts[2])
    except (ImportError, AttributeError):
        raise BagError(f"unknown message type {msgtype}{where}: it is not installed in this "
                       "ROS 2 environment") from None


# ------------------------------------------------------------------------------ writing
def output_layout(out: str | os.PathLike, fmt: str | None) -> tuple[Path, str, bool]:
    """(path, format, single_file): a path ending in .mcap/.db3 is one storage file, any
    other path a rosbag2 directory; `fmt` (None: from the suffix, else mcap) must agree."""
    out = Path(out)
    suffix_fmt = FILE_SUFFIXES.get(out.suffix)
    if fmt is not None and fmt not in FORMATS:
        raise BagError(f"unknown bag format {fmt!r} (use {' or '.join(FORMATS)})")
    if suffix_fmt and fmt and fmt != suffix_fmt:
        raise BagError(f"output {out} ends in {out.suffix} but --format is {fmt}")
    return out, suffix_fmt or fmt or "mcap", suffix_fmt is not None


class BagWriter:
    """Writes a bag atomically: to a hidden temporary path next to `out`, moved to `out` by
    `commit()`; `abort()` (or an exception inside ``with``) removes every trace."""

    def __init__(self, out: str | os.PathLike, fmt: str | None = None,
                 compress: bool = True):
        self.out, self.format, self.single_file = output_layout(out, fmt)
        if self.out.exists():
            raise BagError(f"output {self.out} already exists; remove it or choose another "
                           "path")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._tmp_root = self.out.parent / f".{self.out.name}.partial-{os.getpid()}"
        shutil.rmtree(self._tmp_root, ignore_errors=True)
        self._tmp_root.mkdir()
        # The storage file is named after its directory: name that one like the output.
        self._bag_dir = self._tmp_root / (self.out.stem if self.single_file else self.out.name)
        self._writer = Writer(self._bag_dir, version=9, storage_plugin=FORMATS[self.format])
        if compress and self.format == "mcap":
            self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        self._connections: dict[str, object] = {}
        self._open = True
        try:
            self._writer.open()
        except Exception as exc:  # noqa: BLE001
            self.abort()
            raise BagError(f"cannot write bag {self.out}: {exc}") from None

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def add_topic(self, topic: str, msgtype: str, qos: Qos | Iterable[Qos] | None = None
                  ) -> None:
        """Declare a topic (idempotent); its definition comes from the Jazzy type store."""
        if topic in self._connections:
            return
        profiles = [qos_profile()] if qos is None else (
            [qos] if isinstance(qos, Qos) else list(qos))
        try:
            self._connections[topic] = self._writer.add_connection(
                topic, msgtype, typestore=jazzy_typestore(), offered_qos_profiles=profiles)
        except Exception as exc:  # noqa: BLE001 - an unknown type, a topic twice
            raise BagError(f"cannot add topic {topic} ({msgtype}) to {self.out}: {exc}") \
                from None

    def set_metadata(self, key: str, value: str) -> None:
        """A key/value pair in the bag's metadata (rosbag2 `custom_data`)."""
        self._writer.set_custom_data(key, value)

    def write(self, topic: str, msgtype: str, log_ns: int, raw: bytes) -> None:
        """Append one serialized message at log time `log_ns`."""
        self.add_topic(topic, msgtype)
        self._writer.write(self._connections[topic], int(log_ns), raw)

    def commit(self) -> Path:
        """Finish the bag and move it to the output path; returns that path."""
        if not self._open:
            return self.out
        try:
            self._writer.close()
            self._open = False
            if self.single_file:
                storage = self._bag_dir / f"{self._bag_dir.name}{self.out.suffix}"
                os.replace(storage, self.out)
            else:
                os.replace(self._bag_dir, self.out)
        except BaseException:
            self.abort()
            raise
        shutil.rmtree(self._tmp_root, ignore_errors=True)
        return self.out

    def abort(self) -> None:
        """Drop everything written so far; the output path is left untouched."""
        if self._open:
            self._open = False
            try:
                self._writer.abort()
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(self._tmp_root, ignore_errors=True)


def staged_path(final: Path) -> Path:
    """A hidden temporary sibling of `final` for files or folders moved in place later."""
    return final.parent / f".{final.name}.partial-{os.getpid()}"


def publish_atomically(staged: Path, final: Path) -> None:
    """Move a finished file or folder from its staged path to `final` (which must not exist)."""
    if final.exists():
        raise BagError(f"output {final} appeared while this run was writing it")
    os.replace(staged, final)


def remove_staged(staged: Path) -> None:
    """Remove a staged file or folder, if it is there."""
    if staged.is_dir():
        shutil.rmtree(staged, ignore_errors=True)
    else:
        staged.unlink(missing_ok=True)

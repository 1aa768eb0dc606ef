"""ROS 2 message types as Cyclone DDS IDL structs, named as ROS 2 names them on the wire.

ROS 2 over Cyclone DDS publishes ``pkg/msg/Type`` as the DDS type ``pkg::msg::dds_::Type_`` on topic ``rt/<name>``,
in plain CDR. These structs declare the same fields in the same order, so their bytes are ROS 2's (a test checks
them against the `rosbags` library's ROS 2 CDR encoding) and a real ROS 2 graph can talk to them.

No ``from __future__ import annotations`` here: Cyclone DDS resolves the field annotations at run time.
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cyclonedds.idl import IdlStruct

if TYPE_CHECKING:  # what the wire types hold, for the type checker
    from builtins import float as float64
    from builtins import int as int8
    from builtins import int as int32
    from builtins import int as uint8
    from builtins import int as uint32
    from builtins import list as sequence
else:
    from cyclonedds.idl.types import float64, int8, int32, sequence, uint8, uint32

__all__ = [
    "Bool", "DiagnosticArray", "DiagnosticStatus", "Duration", "Float64MultiArray", "Header", "Image", "JointState",
    "JointTrajectory", "JointTrajectoryPoint", "KeyValue", "MultiArrayDimension", "MultiArrayLayout", "String",
    "Time", "ros_type_name",
]  # fmt: skip


def ros_type_name(struct: type) -> str:
    """``sensor_msgs/msg/JointState`` for the struct named ``sensor_msgs::msg::dds_::JointState_`` on the wire."""
    package, _, _, name = struct.__idl_typename__.split("::")  # type: ignore[attr-defined]
    return f"{package}/msg/{name.removesuffix('_')}"


@dataclass
class Time(IdlStruct, typename="builtin_interfaces::msg::dds_::Time_"):
    sec: int32 = 0
    nanosec: uint32 = 0

    @classmethod
    def from_ns(cls, nanoseconds: int) -> "Time":
        return cls(nanoseconds // 10**9, nanoseconds % 10**9)

    def to_ns(self) -> int:
        return int(self.sec) * 10**9 + int(self.nanosec)


@dataclass
class Duration(IdlStruct, typename="builtin_interfaces::msg::dds_::Duration_"):
    sec: int32 = 0
    nanosec: uint32 = 0

    @classmethod
    def from_ns(cls, nanoseconds: int) -> "Duration":
        return cls(nanoseconds // 10**9, nanoseconds % 10**9)


@dataclass
class Header(IdlStruct, typename="std_msgs::msg::dds_::Header_"):
    stamp: Time = field(default_factory=Time)
    frame_id: str = ""


@dataclass
class String(IdlStruct, typename="std_msgs::msg::dds_::String_"):
    data: str = ""


@dataclass
class Bool(IdlStruct, typename="std_msgs::msg::dds_::Bool_"):
    data: bool = False


@dataclass
class MultiArrayDimension(IdlStruct, typename="std_msgs::msg::dds_::MultiArrayDimension_"):
    label: str = ""
    size: uint32 = 0
    stride: uint32 = 0


@dataclass
class MultiArrayLayout(IdlStruct, typename="std_msgs::msg::dds_::MultiArrayLayout_"):
    dim: sequence[MultiArrayDimension] = field(default_factory=list)
    data_offset: uint32 = 0


@dataclass
class Float64MultiArray(IdlStruct, typename="std_msgs::msg::dds_::Float64MultiArray_"):
    layout: MultiArrayLayout = field(default_factory=MultiArrayLayout)
    data: sequence[float64] = field(default_factory=list)


@dataclass
class JointState(IdlStruct, typename="sensor_msgs::msg::dds_::JointState_"):
    header: Header = field(default_factory=Header)
    name: sequence[str] = field(default_factory=list)
    position: sequence[float64] = field(default_factory=list)
    velocity: sequence[float64] = field(default_factory=list)
    effort: sequence[float64] = field(default_factory=list)


@dataclass
class Image(IdlStruct, typename="sensor_msgs::msg::dds_::Image_"):
    header: Header = field(default_factory=Header)
    height: uint32 = 0
    width: uint32 = 0
    encoding: str = ""
    is_bigendian: uint8 = 0
    step: uint32 = 0
    data: sequence[uint8] = field(default_factory=list)


@dataclass
class JointTrajectoryPoint(IdlStruct, typename="trajectory_msgs::msg::dds_::JointTrajectoryPoint_"):
    positions: sequence[float64] = field(default_factory=list)
    velocities: sequence[float64] = field(default_factory=list)
    accelerations: sequence[float64] = field(default_factory=list)
    effort: sequence[float64] = field(default_factory=list)
    time_from_start: Duration = field(default_factory=Duration)


@dataclass
class JointTrajectory(IdlStruct, typename="trajectory_msgs::msg::dds_::JointTrajectory_"):
    header: Header = field(default_factory=Header)
    joint_names: sequence[str] = field(default_factory=list)
    points: sequence[JointTrajectoryPoint] = field(default_factory=list)


@dataclass
class KeyValue(IdlStruct, typename="diagnostic_msgs::msg::dds_::KeyValue_"):
    key: str = ""
    value: str = ""


@dataclass
class DiagnosticStatus(IdlStruct, typename="diagnostic_msgs::msg::dds_::DiagnosticStatus_"):
    level: int8 = 0  # ROS 'byte': OK 0, WARN 1, ERROR 2, STALE 3
    name: str = ""
    message: str = ""
    hardware_id: str = ""
    values: sequence[KeyValue] = field(default_factory=list)


@dataclass
class DiagnosticArray(IdlStruct, typename="diagnostic_msgs::msg::dds_::DiagnosticArray_"):
    header: Header = field(default_factory=Header)
    status: sequence[DiagnosticStatus] = field(default_factory=list)

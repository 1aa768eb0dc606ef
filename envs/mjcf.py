"""MJCF pieces shared by every task: the table, a gantry gripper, cameras and simple objects.

The robot is a 4-DoF gantry (x, y, z slides and a yaw hinge) carrying a parallel-jaw gripper. It has no arm
kinematics to solve, so a control step costs little more than the physics, and the action space is the
end-effector delta space that teleoperation devices and most manipulation policies use.

Frame conventions: the table top is the plane z = 0; x points away from the front camera's view, y to its left.
Finger joints measure the half-opening: 0 is closed, ``FINGER_OPEN`` fully open.
"""

from __future__ import annotations

__all__ = [
    "FINGER_OPEN",
    "GRIPPER_HOME",
    "TCP_BELOW_PALM",
    "box_body",
    "scene_xml",
]

FINGER_OPEN = 0.045
GRIPPER_HOME = (0.0, 0.0, 0.25)
# The tool centre point (between the fingertips' centres) sits this far below the gripper body origin.
TCP_BELOW_PALM = 0.055

_ASSETS = """
  <asset>
    <texture name="sky" type="skybox" builtin="gradient" rgb1=".55 .62 .7" rgb2=".12 .14 .18" width="64" height="64"/>
    <texture name="grid" type="2d" builtin="checker" rgb1=".42 .44 .47" rgb2=".36 .38 .41" width="256" height="256"/>
    <material name="table" texture="grid" texrepeat="6 6" reflectance=".05"/>
    <material name="metal" rgba=".62 .64 .68 1"/>
    <material name="finger" rgba=".18 .2 .24 1"/>
    <material name="red" rgba=".85 .18 .15 1"/>
    <material name="green" rgba=".2 .7 .25 1"/>
    <material name="blue" rgba=".15 .35 .85 1"/>
    <material name="yellow" rgba=".92 .78 .12 1"/>
    <material name="wood" rgba=".6 .45 .3 1"/>
  </asset>
"""

_GRIPPER = """
    <body name="gripper" pos="{hx} {hy} {hz}" gravcomp="1">
      <joint name="x" type="slide" axis="1 0 0" range="-0.3 0.3"/>
      <joint name="y" type="slide" axis="0 1 0" range="-0.3 0.3"/>
      <joint name="z" type="slide" axis="0 0 1" range="-0.24 0.15"/>
      <joint name="yaw" type="hinge" axis="0 0 1" range="-3.2 3.2" damping="0.05"/>
      <geom name="palm" type="box" size="0.018 0.06 0.012" material="metal" mass="0.6"/>
      <geom name="mast" type="cylinder" size="0.012 0.05" pos="0 0 0.06" material="metal" mass="0.1"
            contype="0" conaffinity="0"/>
      <site name="tcp" pos="0 0 -{tcp}" size="0.004" rgba="1 0 0 0.6" group="4"/>
      <camera name="wrist" pos="0.06 0 0.01" xyaxes="0 -1 0 0.82 0 0.57" fovy="75"/>
      <body name="finger_left" pos="0 0 -0.04" gravcomp="1">
        <joint name="finger_left" type="slide" axis="0 1 0" range="0 {open}"/>
        <geom name="finger_left" type="box" size="0.012 0.006 0.02" pos="0 0.006 -0.015" material="finger"
              mass="0.05" friction="2 0.02 0.002" condim="4"/>
      </body>
      <body name="finger_right" pos="0 0 -0.04" gravcomp="1">
        <joint name="finger_right" type="slide" axis="0 -1 0" range="0 {open}"/>
        <geom name="finger_right" type="box" size="0.012 0.006 0.02" pos="0 -0.006 -0.015" material="finger"
              mass="0.05" friction="2 0.02 0.002" condim="4"/>
      </body>
    </body>
"""

_ACTUATORS = """
  <contact>
    <!-- the fingers never touch each other: closed on nothing, colliding boxes pushed them through one another
         and held them crossed, so the gripper could never open again -->
    <exclude body1="finger_left" body2="finger_right"/>
  </contact>
  <equality>
    <!-- a parallel-jaw gripper: the fingers move together, so a held object cannot drift sideways -->
    <joint joint1="finger_left" joint2="finger_right" polycoef="0 1 0 0 0" solref="0.005 1"/>
  </equality>
  <actuator>
    <position name="x" joint="x" kp="2500" kv="90" ctrlrange="-0.3 0.3"/>
    <position name="y" joint="y" kp="2500" kv="90" ctrlrange="-0.3 0.3"/>
    <position name="z" joint="z" kp="2500" kv="90" ctrlrange="-0.24 0.15"/>
    <position name="yaw" joint="yaw" kp="6" kv="0.3" ctrlrange="-3.2 3.2"/>
    <position name="finger_left" joint="finger_left" kp="300" kv="4" ctrlrange="0 {open}" forcerange="-12 12"/>
    <position name="finger_right" joint="finger_right" kp="300" kv="4" ctrlrange="0 {open}" forcerange="-12 12"/>
  </actuator>
"""


def box_body(
    name: str,
    pos: tuple[float, float, float],
    half_size: tuple[float, float, float],
    material: str,
    mass: float = 0.05,
    free: bool = True,
) -> str:
    """A (free-floating by default) box object; its geom shares the body's name."""
    joint = f'<freejoint name="{name}"/>' if free else ""
    sx, sy, sz = half_size
    x, y, z = pos
    return (
        f'<body name="{name}" pos="{x} {y} {z}">{joint}'
        f'<geom name="{name}" type="box" size="{sx} {sy} {sz}" material="{material}" mass="{mass}" '
        f'friction="1.2 0.01 0.001" condim="4"/></body>'
    )


def scene_xml(model_name: str, objects: str, fixtures: str = "", camera_size: int = 84) -> str:
    """A complete model: table, lights, cameras, the gantry gripper, then the task's objects and fixtures."""
    hx, hy, hz = GRIPPER_HOME
    return f"""
<mujoco model="{model_name}">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.002" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <visual>
    <global offwidth="{max(camera_size, 640)}" offheight="{max(camera_size, 480)}"/>
    <quality shadowsize="1024"/>
  </visual>
  {_ASSETS}
  <worldbody>
    <light pos="0.3 -0.3 1.2" dir="-0.25 0.25 -1" directional="true" diffuse=".8 .8 .8"/>
    <light pos="-0.4 0.4 1.0" dir="0.3 -0.3 -1" directional="true" diffuse=".3 .3 .3" castshadow="false"/>
    <geom name="table" type="plane" size="0.45 0.45 0.01" material="table"/>
    <geom name="table_edge" type="box" size="0.45 0.45 0.02" pos="0 0 -0.0201" material="table"
          contype="0" conaffinity="0"/>
    <body name="look_at" pos="0 0 0.05"/>
    <camera name="front" pos="0.62 0 0.42" mode="targetbody" target="look_at" fovy="50"/>
    <camera name="side" pos="0 -0.62 0.42" mode="targetbody" target="look_at" fovy="50"/>
    {_GRIPPER.format(hx=hx, hy=hy, hz=hz, tcp=TCP_BELOW_PALM, open=FINGER_OPEN)}
    {fixtures}
    {objects}
  </worldbody>
  {_ACTUATORS.format(open=FINGER_OPEN)}
</mujoco>
"""

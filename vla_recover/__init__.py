"""vla_recover: close the post-training loop for robot manipulation policies."""

import os

# Headless offscreen rendering by default. MuJoCo reads MUJOCO_GL once, when it is first imported, so this must
# run before anything imports mujoco; EGL needs a GPU device node that containers often lack.
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

__version__ = "0.1.0"
__all__ = ["__version__"]

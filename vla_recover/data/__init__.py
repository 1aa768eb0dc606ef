"""Episode store (zarr + SQLite), event log, recorder and training-window sampler."""

from vla_recover.data.check import CheckReport, check_store, store_summary
from vla_recover.data.events import RobotView, project_robots
from vla_recover.data.recorder import Recorder, RecorderClient
from vla_recover.data.sampler import WindowSampler, WindowSpec
from vla_recover.data.schema import ACTORS, OUTCOMES, SCHEMA_VERSION, SEGMENT_KINDS, EpisodeData, SchemaError
from vla_recover.data.store import EpisodeStore

__all__ = [
    "ACTORS",
    "OUTCOMES",
    "SCHEMA_VERSION",
    "SEGMENT_KINDS",
    "CheckReport",
    "EpisodeData",
    "EpisodeStore",
    "Recorder",
    "RecorderClient",
    "RobotView",
    "SchemaError",
    "WindowSampler",
    "WindowSpec",
    "check_store",
    "project_robots",
    "store_summary",
]

"""Episode store (zarr + SQLite), event log, recorder and training-window sampler."""

from vla_recover.data.check import CheckReport, check_store, store_summary
from vla_recover.data.events import RobotView, project_robots
from vla_recover.data.index import EpisodeRow, Event, SegmentRow
from vla_recover.data.recorder import Recorder, RecorderClient
from vla_recover.data.sampler import WindowSampler, WindowSpec
from vla_recover.data.schema import ACTORS, OUTCOMES, SCHEMA_VERSION, SEGMENT_KINDS, EpisodeData, SchemaError
from vla_recover.data.store import EpisodeStore, EventRecord

__all__ = [
    "ACTORS",
    "OUTCOMES",
    "SCHEMA_VERSION",
    "SEGMENT_KINDS",
    "CheckReport",
    "EpisodeData",
    "EpisodeRow",
    "EpisodeStore",
    "Event",
    "EventRecord",
    "Recorder",
    "RecorderClient",
    "RobotView",
    "SchemaError",
    "SegmentRow",
    "WindowSampler",
    "WindowSpec",
    "check_store",
    "project_robots",
    "store_summary",
]

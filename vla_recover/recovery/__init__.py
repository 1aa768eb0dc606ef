"""Learning when a robot needs correction (EgoRecovery's recovery gate), and judging any detector of it.

>>> from vla_recover.recovery import RecoveryGate, train_gate, correction_labels, score_detector
"""

from vla_recover.recovery.detection import DetectorScore, branch_alerts, score_detector
from vla_recover.recovery.gate import GateConfig, RecoveryGate, train_gate
from vla_recover.recovery.labels import NEEDS_CORRECTION, UNLABELLED, correction_labels, correction_windows

__all__ = [
    "NEEDS_CORRECTION",
    "UNLABELLED",
    "DetectorScore",
    "GateConfig",
    "RecoveryGate",
    "branch_alerts",
    "correction_labels",
    "correction_windows",
    "score_detector",
    "train_gate",
]

"""The segmentation critic: a progress estimator, the segmenter that cuts episodes by it, and what to retain."""

from vla_recover.critic.retention import RetentionConfig, retention_labels
from vla_recover.critic.segmenter import CRITIC_KINDS, SegmenterConfig, segment_episode

__all__ = ["CRITIC_KINDS", "RetentionConfig", "SegmenterConfig", "retention_labels", "segment_episode"]

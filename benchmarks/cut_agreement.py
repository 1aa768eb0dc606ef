"""How the critic's keep-or-drop decision on the policy's own steps compares with the truth's, per slope threshold.

    python benchmarks/cut_agreement.py RUN [--critic round_1] [--rises 0.002,0.004,0.005,0.007,0.01]

``RUN`` is a loop run folder (a ``critic_cut`` or ``habc`` run of ``benchmarks/loop.py``): its store and the critic
``<RUN>/critics/<critic>``. Every episode in which the policy acted is cut twice: by that critic's curve through the
slope rule at each ``rise_per_step`` (the loop's default segmenter otherwise), and by the simulator's progress as
``critic_cut_gt`` cuts it. Both go through the same retention (progress and recovery kept, human steps always). On
the policy's steps it reports the share each keeps, and the precision and recall of the critic's kept steps against
the truth's: with ``critic_cut``'s fixed 1 : 1 : 1 shares, 1 − precision is the part of the autonomous third of the
loss spent on steps the truth drops. Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.critic.kinds import load_critic
from vla_recover.critic.label import load_episodes
from vla_recover.critic.retention import KEEP, retention_labels
from vla_recover.critic.segmenter import SegmenterConfig, segment_timeline
from vla_recover.data import EpisodeStore
from vla_recover.train.dataset import DatasetConfig, retained_steps
from vla_recover.train.steps import build_step_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a loop run folder with a store and critics/")
    parser.add_argument("--critic", default="round_1", help="which round's critic cuts the curves")
    parser.add_argument("--rises", default="0.002,0.004,0.005,0.007,0.01", help="slope rule rise_per_step values")
    args = parser.parse_args()
    critic_dir = args.run / "critics" / args.critic
    if not (args.run / "store").is_dir() or not critic_dir.is_dir():
        parser.error(f"run: {args.run} has no store/ or critics/{args.critic}/ (a loop run folder is expected)")
    critic = load_critic(critic_dir)
    with EpisodeStore(args.run / "store") as store:
        table = build_step_table(store)
        # the truth's cut exactly as critic_cut_gt trains on it
        kept_by_truth_all = retained_steps(store, table, DatasetConfig(retention="ground_truth"))
        rows = {row.id: row for row in store.episodes()}
        acted = [
            episode
            for episode in load_episodes(store, critic.input_keys, None)
            if table.executed[rows[episode.id].start : rows[episode.id].stop].any()
        ]
    curves = {e.id: critic.predict(e.inputs, e.instruction, where=f"episode {e.id}") for e in acted}
    policy_steps = table.executed & table.included
    kept_by_truth = kept_by_truth_all[policy_steps]
    cells: list[dict[str, Any]] = []
    for rise in [float(x) for x in args.rises.split(",") if x]:
        config = SegmenterConfig(rule="slope", rise_per_step=rise)
        kept = np.ones(table.n, dtype=bool)
        for episode in acted:
            row = rows[episode.id]
            segments = segment_timeline(episode, curves[episode.id], config, None)
            labels = retention_labels(row.length, segments, table.supervision.get(row.id, []))
            kept[row.start : row.stop] = labels == KEEP
        by_critic = kept[policy_steps]
        both = int((by_critic & kept_by_truth).sum())
        cells.append({
            "rise_per_step": rise,
            "critic_kept": round(float(by_critic.mean()), 3),
            "precision": round(both / max(int(by_critic.sum()), 1), 3),
            "recall": round(both / max(int(kept_by_truth.sum()), 1), 3),
            "agreement": round(float((by_critic == kept_by_truth).mean()), 3),
        })  # fmt: skip
        print(f"[cell] rise {rise:g}: {cells[-1]}", flush=True)
    print(json.dumps({
        "run": str(args.run), "critic": args.critic, "episodes": len(acted), "policy_steps": int(kept_by_truth.size),
        "truth_kept": round(float(kept_by_truth.mean()), 3), "cells": cells,
    }))  # fmt: skip


if __name__ == "__main__":
    main()

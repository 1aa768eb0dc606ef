"""`vla-recover critic train | tune | plot` and `vla-recover label`: the segmentation critic from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from vla_recover.cli.common import console, progress_bar, user_errors

__all__ = ["critic_app", "label"]

critic_app = typer.Typer(help="Train the progress critic and look at what it sees.", no_args_is_help=True)


@critic_app.command("train")
def train(
    store: Annotated[Path, typer.Option(help="episode store to train on")],
    out: Annotated[Path, typer.Option(help="critic directory to write")],
    config: Annotated[Path | None, typer.Option(help="YAML config (configs/critic/*.yaml); default: embedded")] = None,
    steps: Annotated[int | None, typer.Option(help="gradient steps (overrides the config)", min=1)] = None,
    task: Annotated[str | None, typer.Option(help="train on this task's episodes only")] = None,
) -> None:
    """Train on stored episodes; writes the critic, metrics.json (held-out VOC, Pearson) and plots. The config's
    ``kind`` picks a registered critic (default ``progress``)."""
    from vla_recover.config import load_yaml
    from vla_recover.critic.kinds import critic_train_config, fit_critic

    with user_errors():
        raw: dict[str, Any] = load_yaml(config) if config else {}
        raw.update({k: v for k, v in {"steps": steps, "task": task}.items() if v is not None})
        _, cfg = critic_train_config(raw, source=str(config or "embedded default"))
        total = getattr(cfg, "steps", None)
        if not Path(store).exists():
            raise FileNotFoundError(f"store: {store} does not exist")
        with progress_bar() as progress:
            job = progress.add_task("train critic", total=total, status="")

            def on_step(step: int, loss: float) -> None:
                if step % 10 == 0 or step == total:
                    progress.update(job, completed=step, status=f"loss {loss:.4f}")

            metrics = fit_critic(store, out, raw, on_step)
    console.print(f"critic saved to {out}; held-out curves {out / 'held_out_progress.png'}")
    print(json.dumps(metrics))


@critic_app.command("tune")
def tune(
    store: Annotated[Path, typer.Option(help="sim fleet store whose episodes carry the simulator's progress")],
    critic: Annotated[Path, typer.Option(help="critic directory (vla-recover critic train); the segmenter goes in it")],
    trees: Annotated[int, typer.Option(help="trees in the forest", min=1, max=2000)] = 100,
    task: Annotated[str | None, typer.Option(help="tune on this task's episodes only")] = None,
    state_motion: Annotated[
        bool, typer.Option(help="describe each step by how the critic's state moved too, not only by its curve")
    ] = True,
) -> None:
    """Fit a segmenter to this critic's curves against the simulator's ground truth; label then uses it."""
    from vla_recover.config import validate_config
    from vla_recover.critic.tune import tune_segmenter
    from vla_recover.critic.tuned import TuneConfig

    with user_errors():
        if not Path(store).exists():
            raise FileNotFoundError(f"store: {store} does not exist")
        with progress_bar() as progress:
            job = progress.add_task("tune segmenter", total=None, status="")
            metrics = tune_segmenter(
                store, critic, validate_config(TuneConfig, {"trees": trees, "state_motion": state_motion}), task,
                lambda stage: progress.update(job, status=stage),
            )  # fmt: skip
    scores = metrics["held_out_macro_f1"]
    console.print(
        f"tuned segmenter saved in {critic}; held-out macro-F1 {scores['tuned']} (slope rule {scores['slope_rule']})"
    )
    print(json.dumps(metrics))


@critic_app.command("plot")
def plot(
    store: Annotated[Path, typer.Option(help="episode store")],
    episode: Annotated[int, typer.Option(help="episode id", min=0)],
    out: Annotated[Path, typer.Option(help="PNG file to write")],
    critic: Annotated[Path | None, typer.Option(help="critic directory; default: the one that labelled it")] = None,
) -> None:
    """One episode's progress curve with ground truth, the cut segments by kind and the intervention spans."""
    import numpy as np

    from vla_recover.critic.data import load_episodes
    from vla_recover.critic.kinds import load_critic
    from vla_recover.critic.label import critic_segments
    from vla_recover.critic.plots import plot_episode_file
    from vla_recover.data import EpisodeStore

    with user_errors():
        with EpisodeStore(store) as opened:
            if not 0 <= episode < len(opened):
                raise ValueError(f"episode: {episode} is not in {store} (ids 0..{len(opened) - 1})")
            if critic is None:  # the critic that labelled this episode last
                labelled = opened.events(kind="labels_written", episode=episode)
                if not labelled:
                    raise ValueError(f"episode {episode}: no critic labels yet; run vla-recover label or give --critic")
                critic = Path(labelled[-1].payload["critic"])
            model = load_critic(critic)
            chosen = next(e for e in load_episodes(opened, model.input_keys) if e.id == episode)
            stored = [(s.start, s.stop, s.kind) for s in opened.segments(episode=episode, source="critic")]
        curve, computed = critic_segments(model, chosen)
        plot_episode_file(chosen, np.asarray(curve), stored or computed, out)
    console.print(f"wrote {out}")


def label(
    store: Annotated[Path, typer.Option(help="episode store to label")],
    critic: Annotated[Path, typer.Option(help="critic directory (vla-recover critic train)")],
    config: Annotated[Path | None, typer.Option(help="segmenter YAML (configs/critic/*.yaml 'segmenter')")] = None,
    task: Annotated[str | None, typer.Option(help="label this task's episodes only")] = None,
) -> None:
    """Cut every episode into progress / idle / failure-inducing / recovery segments (source 'critic')."""
    from vla_recover.config import load_yaml, validate_config
    from vla_recover.critic.label import label_store
    from vla_recover.critic.segmenter import SegmenterConfig

    with user_errors():
        raw: dict[str, Any] = load_yaml(config) if config else {}
        segmenter = validate_config(SegmenterConfig, raw.get("segmenter", raw), source=str(config or "default"))
        if not Path(store).exists():
            raise FileNotFoundError(f"store: {store} does not exist")
        with progress_bar() as progress:
            job = progress.add_task("label", total=None, status="")

            def on_episode(done: int, total: int) -> None:
                progress.update(job, completed=done, total=total)

            summary = label_store(store, critic, segmenter, task, on_episode)
    print(json.dumps(summary))

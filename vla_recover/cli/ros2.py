"""`vla-recover ros2 serve`: a promoted policy as a ROS 2 node (over DDS with the ROS 2 wire conventions)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Annotated

import typer

from vla_recover.cli.common import console, user_errors

__all__ = ["ros2_app"]

ros2_app = typer.Typer(help="Run a policy on a robot over ROS 2.", no_args_is_help=True)


@ros2_app.command("serve")
def serve(
    config: Annotated[Path, typer.Option(help="node YAML (configs/ros2/*.yaml)")],
    policy: Annotated[Path | None, typer.Option(help="policy checkpoint directory")] = None,
    remote: Annotated[
        str | None,
        typer.Option(help="instead of --policy: a policy server's http://HOST:PORT (token in VLA_RECOVER_SERVE_TOKEN)"),
    ] = None,
    domain_id: Annotated[
        int | None, typer.Option(help="ROS_DOMAIN_ID (default: the environment's, else 0)", min=0, max=232)
    ] = None,
    dds_config: Annotated[Path | None, typer.Option(help="Cyclone DDS XML (e.g. loopback only)")] = None,
    seconds: Annotated[float | None, typer.Option(help="stop after this long (default: until Ctrl-C)")] = None,
    transport: Annotated[str, typer.Option(help="auto (rclpy when installed, else dds), rclpy or dds")] = "auto",
) -> None:
    """Subscribe joint states, cameras, instruction and e-stop; publish commands and diagnostics."""
    from vla_recover.fleet.inference import PolicyChunks, RemoteChunks
    from vla_recover.ros2.node import PolicyNode, load_node_config
    from vla_recover.ros2.transport import make_transport

    with user_errors():
        node_config = load_node_config(config)
        if (policy is None) == (remote is None):
            raise ValueError("policy / remote: give exactly one (a checkpoint directory or a policy server's URL)")
        joints = len(node_config.joint_names)
        source: PolicyChunks | RemoteChunks
        if remote is not None:
            source = RemoteChunks(remote)
            state_dim, action_dim = source.state_dim or joints, source.action_dim
        else:
            assert policy is not None
            if not (policy / "config.json").is_file():
                raise FileNotFoundError(f"policy: {policy} is not a policy checkpoint (no config.json)")
            source = PolicyChunks(policy, device=node_config.device)
            state_dim = source.policy.shapes.get(source.policy.config.state_key or "", (joints,))[0]
            action_dim = source.policy.action_dim
        if state_dim != joints or action_dim != joints:
            raise ValueError(
                f"joint_names: {joints} joints, but the policy reads a state of {state_dim} and writes actions of "
                f"{action_dim}"
            )
        node = PolicyNode(
            node_config, source, make_transport(transport, "vla_recover_policy_node", domain_id, dds_config)
        )
        node.start()
    console.print(f"policy node up: {node_config.joint_states_topic} → {node_config.command_topic} (Ctrl-C stops)")
    try:
        end = time.monotonic() + seconds if seconds is not None else float("inf")
        while time.monotonic() < end:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        node.stop()


@ros2_app.command("standin")
def standin(
    task: Annotated[str, typer.Option(help="the registered task the stand-in arm runs in MuJoCo")] = "LiftCube",
    namespace: Annotated[str, typer.Option(help="its topics' prefix, e.g. /arm_left")] = "/arm",
    name: Annotated[str, typer.Option(help="the robot's name in the fleet entry it prints")] = "arm",
    seed: Annotated[int, typer.Option(help="the first episode's seed (each home takes the next)")] = 0,
    camera: Annotated[
        list[str] | None, typer.Option(help="a camera of the task to publish as sensor_msgs/Image (repeatable)")
    ] = None,
    image_size: Annotated[int, typer.Option(help="pixels of each square camera image", min=16, max=1024)] = 84,
    domain_id: Annotated[
        int | None, typer.Option(help="ROS_DOMAIN_ID (default: the environment's, else 0)", min=0, max=232)
    ] = None,
    dds_config: Annotated[Path | None, typer.Option(help="Cyclone DDS XML (e.g. loopback only)")] = None,
    seconds: Annotated[float | None, typer.Option(help="stop after this long (default: until Ctrl-C)")] = None,
) -> None:
    """A MuJoCo task as an arm on a ROS 2 graph: joint states, object poses and cameras out, commands, home and
    faults in. Prints the fleet's robots entry for it (YAML), then serves."""
    import yaml

    from vla_recover.ros2.standin import StandInArm
    from vla_recover.ros2.transport import DdsTransport

    with user_errors():
        task_config = {"cameras": list(camera), "image_size": image_size} if camera else None
        arm = StandInArm(task, namespace, task_config, seed=seed)
        arm.start(DdsTransport(domain_id, dds_config))
    entry = arm.robot_entry(name)
    entry.update({"domain_id": domain_id} if domain_id is not None else {})
    entry.update({"dds_config": str(dds_config.resolve())} if dds_config is not None else {})
    typer.echo(yaml.safe_dump({"robots": [entry]}, sort_keys=False), nl=False)
    typer.echo(f"# stand-in arm up: {arm.task} on {namespace}/* (Ctrl-C stops)")  # a YAML comment: copy it all
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # `kill` stops it as cleanly as Ctrl-C
    try:
        arm.run(seconds, stop)
    except KeyboardInterrupt:
        pass
    finally:
        arm.close()

"""The critic registry (a registered example critic is tested in tests/docs/test_extending_examples.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vla_recover.critic.kinds import CRITICS, load_critic


def test_the_builtin_critic_is_registered_and_an_unknown_name_lists_the_choices(tmp_path: Path) -> None:
    assert CRITICS.names() == ["progress"]
    with pytest.raises(KeyError, match="unknown critic 'toy'; valid choices: progress"):
        CRITICS.unregister("toy")
    with pytest.raises(FileNotFoundError, match="not a critic checkpoint"):
        load_critic(tmp_path)
    (tmp_path / "config.json").write_text('{"critic": "toy"}')
    with pytest.raises(KeyError, match="unknown critic 'toy'"):
        load_critic(tmp_path)

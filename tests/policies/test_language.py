from __future__ import annotations

import numpy as np

from vla_recover.policies.common.encoders import SentenceEmbedder


def test_instruction_embeddings_come_from_the_bundled_model_offline(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = SentenceEmbedder()
    red, red_again, blue, peg = embedder.embed(
        ["put the red cube in the bin", "place the red block into the bin", "put the blue cube in the bin",
         "insert the peg into the hole"]
    )  # fmt: skip
    assert red.shape == (384,) and np.isclose(np.linalg.norm(red), 1.0, atol=1e-4)
    assert red @ red_again > red @ peg and red @ blue > red @ peg
    cached = embedder.embed(["insert the peg into the hole"])
    assert np.array_equal(cached[0], peg) and len(embedder.cache) == 4

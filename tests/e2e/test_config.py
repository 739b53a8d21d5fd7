"""config/get and config/update: defaults, partial merge, and the environment winning."""

from __future__ import annotations

from sidecar_client import Client

from .conftest import Spawner


async def test_defaults(client: Client) -> None:
    config = await client.get_config()
    assert config.compaction.auto is True
    assert config.compaction.prune is True
    assert config.compaction.method == "standard"
    assert config.summarizer.provider == "extractive"


async def test_update_is_a_partial_deep_merge(client: Client) -> None:
    updated = await client.update_config({"compaction": {"prune": False}})
    assert updated.compaction.prune is False
    assert updated.compaction.auto is True  # untouched siblings keep their values
    assert updated.compaction.method == "standard"

    updated = await client.update_config({"compaction": {"method": "collapse", "reserved": 500}})
    assert updated.compaction.method == "collapse"
    assert updated.compaction.reserved == 500
    assert updated.compaction.prune is False  # earlier updates are kept

    raw = await client.request("config/get", {})
    assert raw["compaction"]["prune"] is False and raw["compaction"]["method"] == "collapse"
    assert await client.get_config() == updated


async def test_initialization_options_are_a_config_layer(spawner: Spawner) -> None:
    client = await spawner(initialization_options={"compaction": {"prune": False}})
    config = await client.get_config()
    assert config.compaction.prune is False
    assert config.compaction.auto is True
    # config/update is layered above it.
    assert (await client.update_config({"compaction": {"prune": True}})).compaction.prune is True


async def test_disable_autocompact_env_wins_over_config_update(spawner: Spawner) -> None:
    client = await spawner(env={"OPENCODE_DISABLE_AUTOCOMPACT": "1"})
    assert (await client.get_config()).compaction.auto is False
    updated = await client.update_config({"compaction": {"auto": True, "prune": False}})
    assert updated.compaction.auto is False
    assert updated.compaction.prune is False  # the rest of the update applies
    assert (await client.get_config()).compaction.auto is False

"""config/get and config/update: defaults, partial merge, and the environment winning."""

from __future__ import annotations

import pytest
from sidecar_client import Client, RpcError

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


async def test_config_get_shows_every_effective_value_defaults_included(client: Client) -> None:
    raw = await client.request("config/get", {})
    assert raw["compaction"]["auto"] is True and raw["compaction"]["pruneProtect"] == 40_000
    assert raw["summarizer"]["provider"] == "extractive" and raw["summarizer"]["maxRetries"] == 4
    assert raw["server"]["maxDepth"] == 64 and raw["server"]["maxReplyBytes"] == 128 << 20


async def test_unknown_keys_and_out_of_range_values_name_the_key(client: Client) -> None:
    for patch, named in (
        ({"compaction": {"atuo": False}}, "`atuo` - at `$.config.compaction` (did you mean `auto`"),
        ({"compation": {}}, "did you mean `compaction`"),
        ({"compaction": {"trigger": 1.5}}, "$.config.compaction.trigger"),
        ({"compaction": {"reserved": -1}}, "$.config.compaction.reserved"),
    ):
        with pytest.raises(RpcError) as err:
            await client.update_config(patch)
        assert err.value.code == -32602 and named in err.value.message, err.value.message

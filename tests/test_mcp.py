"""``shortterm mcp``, driven by the official SDK's own stdio client, as a host would."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

import shortterm
from shortterm import Category, ScopeKey, ServerSettings

UPDATE = "update_short_term_memory"
READ = "read_short_term_memory"


@asynccontextmanager
async def connected(store: str, *options: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "shortterm.cli", "mcp", "--store", store, *options]
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _text(result: object) -> str:
    return "\n".join(block.text for block in result.content)  # type: ignore[attr-defined]


async def test_a_fixed_scope_lists_updates_and_reads_back(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'mcp.db'}"
    fixed = ("--user-id", "u1", "--channel-id", "c1", "--server-id", "g1", "--bot-name", "Tomo")
    async with connected(store, *fixed) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == {UPDATE, READ}
        schema = tools[UPDATE].input_schema
        assert list(schema["properties"]) == ["summary"] and schema["required"] == ["summary"]
        assert tools[READ].input_schema["properties"] == {}  # the scope is not the model's

        empty = await session.call_tool(READ, {})
        assert not empty.is_error and "Nothing is remembered" in _text(empty)

        done = await session.call_tool(UPDATE, {"summary": "Hike on Saturday, ridge trail."})
        assert not done.is_error, _text(done)
        read = await session.call_tool(READ, {})
        assert not read.is_error and "│ Hike on Saturday, ridge trail." in _text(read)
        assert "Tomo's working memory" in _text(read)

        resources = (await session.list_resources()).resources
        assert [str(r.uri) for r in resources] == ["shortterm://context"]
        contents = (await session.read_resource("shortterm://context")).contents
        assert "Hike on Saturday" in contents[0].text  # type: ignore[union-attr]

        refused = await session.call_tool(UPDATE, {"summary": 5})
        assert refused.is_error and "must be a string" in _text(refused)
        other = await session.call_tool(UPDATE, {"summary": "x", "user_id": "u2"})
        assert other.is_error  # a fixed scope cannot be steered by the model
        unknown = await session.call_tool("forget_everything", {})
        assert unknown.is_error and UPDATE in _text(unknown)

    # The write went through the library's durable path: both scopes, on disk.
    async with shortterm.open(store) as memory:
        for key in (ScopeKey.user("u1", "c1"), ScopeKey.server("g1", "c1")):
            entry = await memory.get(key)
            assert entry is not None and entry.summary == "Hike on Saturday, ridge trail."


async def test_free_scope_parts_are_tool_arguments(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'mcp.db'}"
    async with shortterm.open(store) as memory:
        categories = [Category("Mood", "How the room feels"), Category("Plans", "What is next")]
        await memory.configure_server("g1", ServerSettings(categories=categories))
    async with connected(store, "--server-id", "g1") as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        schema = tools[UPDATE].input_schema
        assert list(schema["properties"]) == [
            "user_id",
            "channel_id",
            "persona_id",
            "mood",
            "plans",
        ]
        assert schema["required"] == ["user_id", "channel_id"]
        assert "server_id" not in tools[READ].input_schema["properties"]  # fixed by the option

        missing = await session.call_tool(UPDATE, {"mood": "calm"})
        assert missing.is_error and "user_id" in _text(missing)
        args = {"user_id": "u1", "channel_id": "c1", "persona_id": "7"}
        done = await session.call_tool(UPDATE, {**args, "mood": "excited", "plans": "a hike"})
        assert not done.is_error, _text(done)
        read = await session.call_tool(READ, args)
        assert "excited" in _text(read) and "a hike" in _text(read)
        elsewhere = await session.call_tool(READ, {**args, "channel_id": "c2"})
        assert "excited" in _text(elsewhere)  # the server's other channel, recalled there

        templates = (await session.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == [
            "shortterm://context{?user_id,channel_id,persona_id}"
        ]
        uri = "shortterm://context?user_id=u1&channel_id=c1&persona_id=7"
        contents = (await session.read_resource(uri)).contents
        assert "excited" in contents[0].text  # type: ignore[union-attr]


async def test_a_free_server_gets_the_default_schema_and_is_told_its_fields(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'mcp.db'}"
    async with shortterm.open(store) as memory:
        categories = [Category("Mood", "How the room feels")]
        await memory.configure_server("g1", ServerSettings(categories=categories))
    async with connected(store, "--channel-id", "c1") as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        schema = tools[UPDATE].input_schema
        assert list(schema["properties"]) == ["user_id", "server_id", "persona_id", "summary"]
        scope = {"user_id": "u1", "server_id": "g1"}
        refused = await session.call_tool(UPDATE, {**scope, "summary": "notes"})
        assert refused.is_error and "mood" in _text(refused)
        done = await session.call_tool(UPDATE, {**scope, "mood": "calm"})
        assert not done.is_error, _text(done)
        dm = await session.call_tool(UPDATE, {"user_id": "u1", "summary": "a DM note"})
        assert not dm.is_error, _text(dm)
        assert "a DM note" in _text(await session.call_tool(READ, {"user_id": "u1"}))


async def test_a_resource_uri_not_utf8_once_decoded_is_refused(tmp_path: Path) -> None:
    # Decoding with replacement would read %FF and %FE both as the user "\ufffd": two callers
    # would share (and could clear) one memory. The sidecar answers 422; MCP refuses the same.
    store = f"sqlite:///{tmp_path / 'mcp.db'}"
    async with connected(store, "--channel-id", "c1") as session:
        for raw, part in (
            ("user_id=%FF", "user_id"),
            ("user_id=%FE", "user_id"),
            ("user_id=u1&server_id=%C0%AF", "server_id"),
            ("user_id=%E2%82", "user_id"),  # a UTF-8 sequence cut short
            ("user_id=u%G1", "user_id"),  # not an escape at all
            ("user_id=u1%", "user_id"),
            ("%FF=u1", "query"),
        ):
            with pytest.raises(MCPError) as refused:
                await session.read_resource(f"shortterm://context?{raw}")
            assert refused.value.error.code == INVALID_PARAMS, raw
            message = refused.value.error.message
            assert message.startswith(f"{part}="), (raw, message)
            assert refused.value.error.data["field"] == part
            assert "percent" in message, (raw, message)

        # Well-formed escapes still decode, UTF-8 included: é is %C3%A9.
        uri = "shortterm://context?user_id=%C3%A9t%C3%A9&server_id=g%201"
        contents = (await session.read_resource(uri)).contents
        assert contents[0].uri == "shortterm://context?user_id=%C3%A9t%C3%A9&server_id=g+1"

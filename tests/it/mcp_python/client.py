"""Drives `hetch mcp` with the official Python MCP SDK (PyPI `mcp`), a client written
independently of the server's Rust SDK: tests/mcp_python.rs runs it.

    client.py HETCH POLICY [STEPS]

spawns `HETCH mcp --policy POLICY` over stdio and carries out STEPS (a JSON list; read
from stdin when absent or "-"). A step is
    {"tool": NAME, "arguments": {...}, "token_from": K, "progress": true}
"token_from" (optional) sets arguments["token"] to the confirm_token of step K's
result (K counts from 0; negative counts back, -1 being the previous step).
"progress" (default true) passes a progress callback to call_tool.

Prints JSON lines on stdout: the handshake, the tool names, the resources (and the
policy resource's text), then one line per step: its structuredContent, isError, and
the number of progress notifications received during the call.
"""

import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

CALL_TIMEOUT_SECS = 120.0


def emit(obj):
    print(json.dumps(obj), flush=True)


def dumped(model):
    """A result as it was on the wire (camelCase keys, as in the protocol)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run(hetch, policy, steps):
    # The SDK hands the server a minimal environment; keep hetch's own variables
    # (the tests point HETCH_CONFIG_DIR away from the user's config).
    env = {k: v for k, v in os.environ.items() if k.startswith("HETCH_")}
    params = StdioServerParameters(command=hetch, args=["mcp", "--policy", policy], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = dumped(await session.initialize())
            emit({"protocolVersion": init.get("protocolVersion"), "serverInfo": init.get("serverInfo")})
            tools = (await session.list_tools()).tools
            emit({"tools": [t.name for t in tools]})
            resources = (await session.list_resources()).resources
            emit({"resources": [{"uri": str(r.uri), "name": r.name} for r in resources]})
            for r in resources:
                if str(r.uri) == "hetch-mcp://policy":
                    contents = (await session.read_resource(r.uri)).contents
                    emit({"resource": str(r.uri), "text": [getattr(c, "text", None) for c in contents]})

            results = []
            for i, step in enumerate(steps):
                args = dict(step.get("arguments", {}))
                if "token_from" in step:
                    k = step["token_from"]
                    source = results[k] if k >= 0 else results[i + k]
                    args["token"] = (source.get("structuredContent") or {}).get("confirm_token")
                notes = []

                async def on_progress(progress, total, message, notes=notes):
                    notes.append({"progress": progress, "total": total, "message": message})

                callback = on_progress if step.get("progress", True) else None
                result = dumped(
                    await session.call_tool(
                        step["tool"], args, read_timeout_seconds=CALL_TIMEOUT_SECS, progress_callback=callback
                    )
                )
                line = {
                    "step": i,
                    "tool": step["tool"],
                    "isError": bool(result.get("isError", False)),
                    "structuredContent": result.get("structuredContent"),
                    "progress": len(notes),
                    "lastProgress": notes[-1] if notes else None,
                }
                if line["structuredContent"] is None:
                    line["content"] = result.get("content")
                results.append(line)
                emit(line)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    hetch, policy = sys.argv[1], sys.argv[2]
    text = sys.argv[3] if len(sys.argv) == 4 and sys.argv[3] != "-" else sys.stdin.read()
    anyio.run(run, hetch, policy, json.loads(text))


if __name__ == "__main__":
    main()

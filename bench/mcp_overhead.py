"""What the guardrails of `hetch mcp` cost: one copy through MCP (plan, then confirm),
timed call by call, with the CPU-seconds of `hetch mcp` and every hetch it ran.

Usage: mcp_overhead.py HETCH POLICY SRC DST   (prints one JSON line)
Run by bench/mcp-overhead.sh with the venv of bench/install-mcp-client.sh.
"""
import asyncio
import json
import resource
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(hetch, policy, src, dst):
    params = StdioServerParameters(command=hetch, args=["mcp", "--policy", policy])
    out = {}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            t = time.perf_counter()
            plan = await s.call_tool("copy", {"sources": [src], "destination": dst})
            out["plan_seconds"] = time.perf_counter() - t
            token = plan.structured_content["confirm_token"]
            t = time.perf_counter()
            done = await s.call_tool("confirm", {"token": token, "wait_seconds": 600})
            out["confirm_seconds"] = time.perf_counter() - t
            out["state"] = done.structured_content["state"]
            out["copy_seconds"] = done.structured_content["result"]["seconds"]
            out["bytes"] = done.structured_content["result"]["bytes"]
    # `hetch mcp` has exited and waited for its children: their CPU is counted here.
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["cpu_seconds"] = ru.ru_utime + ru.ru_stime
    print(json.dumps(out))


asyncio.run(main(*sys.argv[1:5]))

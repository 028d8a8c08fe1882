"""ragidx inside other tools: the Model Context Protocol server (:mod:`ragidx.integrations.mcp_server`)."""

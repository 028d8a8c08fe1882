// A second MCP client, not ragidx's: the official TypeScript SDK (@modelcontextprotocol/sdk), over streamable HTTP
// with an API key, reading as that key's reader. Prints one JSON line: what each tool and resource gave back.
//
//   mkdir -p /tmp/inspector && cd /tmp/inspector && npm install @modelcontextprotocol/inspector   # brings the SDK
//   NODE_PATH=/tmp/inspector/node_modules node benchmarks/mcp_ts_client.mjs http://127.0.0.1:8000/mcp KEY "question"
import { createRequire } from "node:module";

const require = createRequire(process.env.NODE_PATH.replace(/\/?$/, "/") + "x.js");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const [url, key, question] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: key ? { Authorization: `Bearer ${key}` } : {} },
});
const client = new Client({ name: "ts-check", version: "1.0.0" });
const out = {};
try {
  await client.connect(transport);
  out.tools = (await client.listTools()).tools.map((t) => t.name);
  const found = await client.callTool({ name: "search", arguments: { query: question, top_k: 10 } });
  out.search = found.structuredContent.articles.map((a) => a.kb_id);
  const asked = await client.callTool({ name: "ask", arguments: { question } });
  out.citations = asked.structuredContent.citations.map((c) => c.kb_id);
  out.sources = asked.structuredContent.sources.map((s) => s.kb_id);
  let cursor;
  out.resources = [];
  do {
    const page = await client.listResources(cursor ? { cursor } : {});
    out.resources.push(...page.resources.map((r) => r.name));
    cursor = page.nextCursor;
  } while (cursor);
  const refused = await client.callTool({ name: "get_article", arguments: { kb_id: "hr-payroll" } });
  out.get_hr_payroll = refused.isError ? "refused" : refused.structuredContent.kb_id;
} catch (error) {
  out.error = String(error.message || error).slice(0, 200);
}
console.log(JSON.stringify(out));
await client.close().catch(() => {});

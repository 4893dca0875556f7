// Anthropic's TypeScript SDK (`@anthropic-ai/sdk`) against a running eoc-proxy's Messages API
// (run by e2e/messages_test.go). Env: EOC_PROXY_URL (the proxy's root: the SDK adds /v1),
// EOC_MODEL (a model the real Ollama serves), EOC_TOOL_MODEL (served by a fake that calls the
// weather tool, then answers with what the tool said), EOC_KEY (a key without a budget),
// EOC_POOR_KEY (a key whose joule budget one call spends), EOC_E2E_NODE_MODULES (where `npm ci`
// put the SDK). Prints "ok - CHECK" per check; exits 1 at the first failure.
"use strict";
const assert = require("node:assert/strict");
const path = require("node:path");

const sdk = require(path.join(process.env.EOC_E2E_NODE_MODULES, "@anthropic-ai/sdk"));
const model = process.env.EOC_MODEL;
const toolModel = process.env.EOC_TOOL_MODEL;
const opts = { baseURL: process.env.EOC_PROXY_URL, maxRetries: 0, timeout: 120_000 };
const client = new sdk.Anthropic({ ...opts, apiKey: process.env.EOC_KEY });

function prompt() {
  return Array.from({ length: 8 }, () => Math.random().toString(36).slice(2, 8)).join(" ");
}

async function check(name, fn) {
  await fn();
  console.log("ok - " + name);
}

// checkHeaders asserts the X-EOC headers of a whole answer.
function checkHeaders(response, stage) {
  const joules = Number(response.headers.get("x-eoc-joules"));
  assert.ok(Number.isFinite(joules) && joules > 0, `X-EOC-Joules ${response.headers.get("x-eoc-joules")}`);
  assert.equal(response.headers.get("x-eoc-stage"), stage);
  assert.match(response.headers.get("x-eoc-receipt") || "", /^[0-9a-f]{16,}$/);
}

// checkEOC asserts a stream's eoc event: the figures, with their receipt, before message_stop.
function checkEOC(events) {
  const types = events.map(e => e.type);
  assert.equal(types[0], "message_start");
  assert.equal(types.at(-1), "message_stop", `events ${types}`);
  const i = types.indexOf("eoc");
  assert.ok(i > 0 && types[i - 1] === "message_delta", `the eoc event is not between message_delta and message_stop: ${types}`);
  const eoc = events[i].eoc;
  assert.ok(Number.isFinite(eoc.joules) && eoc.joules > 0, `eoc ${JSON.stringify(eoc)}`);
  assert.match(eoc.receipt, /^[0-9a-f]{16,}$/);
  assert.ok(eoc.stage);
}

// streamed runs messages.stream() to its finalMessage(), keeping every event.
async function streamed(params) {
  const stream = client.messages.stream(params);
  const events = [];
  stream.on("streamEvent", ev => events.push(ev));
  const msg = await stream.finalMessage();
  return { msg, events, response: stream.response };
}

const weather = {
  name: "weather",
  description: "The weather in a city.",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};

async function main() {
  const repeat = { model, max_tokens: 8, messages: [{ role: "user", content: prompt() }] };
  let first;

  await check("messages.create gives a Message and the X-EOC headers", async () => {
    const { data, response } = await client.messages.create(repeat).withResponse();
    assert.equal(response.status, 200);
    checkHeaders(response, "neural");
    assert.equal(data.type, "message");
    assert.equal(data.role, "assistant");
    assert.match(data.id, /^msg_/);
    assert.ok(data.content.length >= 1 && data.content[0].type === "text", JSON.stringify(data.content));
    assert.ok(["end_turn", "max_tokens"].includes(data.stop_reason), `stop_reason ${data.stop_reason}`);
    assert.ok(data.usage.input_tokens > 0 && data.usage.output_tokens > 0, JSON.stringify(data.usage));
    first = data;
  });

  await check("a repeat is answered by the cache", async () => {
    const { data, response } = await client.messages.create(repeat).withResponse();
    checkHeaders(response, "cache");
    assert.deepEqual(data.content, first.content);
  });

  await check("messages.stream() and finalMessage(), with an eoc event", async () => {
    const { msg, events, response } = await streamed({ model, max_tokens: 8, messages: [{ role: "user", content: prompt() }] });
    assert.equal(response.headers.get("x-eoc-stage"), "neural");
    assert.ok(msg.content.length >= 1 && msg.content[0].type === "text" && msg.content[0].text.length > 0, JSON.stringify(msg.content));
    assert.ok(["end_turn", "max_tokens"].includes(msg.stop_reason), `stop_reason ${msg.stop_reason}`);
    assert.ok(msg.usage.output_tokens > 0, JSON.stringify(msg.usage));
    assert.ok(events.some(e => e.type === "content_block_delta" && e.delta.type === "text_delta"));
    checkEOC(events);
  });

  await check("a tool_use round trip on a fake backend", async () => {
    const ask = { role: "user", content: "What is the weather in Paris?" };
    const { data: call, response } = await client.messages.create({ model: toolModel, max_tokens: 64, tools: [weather], messages: [ask] }).withResponse();
    checkHeaders(response, "neural");
    assert.equal(call.stop_reason, "tool_use");
    const use = call.content.find(b => b.type === "tool_use");
    assert.ok(use, JSON.stringify(call.content));
    assert.equal(use.name, "weather");
    assert.deepEqual(use.input, { city: "Paris" });
    const answer = await client.messages.create({
      model: toolModel, max_tokens: 64, tools: [weather],
      messages: [ask, { role: "assistant", content: call.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny, 21 C" }] }],
    });
    assert.equal(answer.stop_reason, "end_turn");
    assert.equal(answer.content[0].type, "text");
    assert.match(answer.content[0].text, /sunny, 21 C/, "the fake did not get the tool's result");
  });

  await check("a streamed tool_use builds its input from input_json_delta", async () => {
    const { msg, events } = await streamed({ model: toolModel, max_tokens: 64, tools: [weather],
      messages: [{ role: "user", content: "And in Lyon? " + prompt() }] });
    assert.equal(msg.stop_reason, "tool_use");
    const use = msg.content.find(b => b.type === "tool_use");
    assert.ok(use, JSON.stringify(msg.content));
    assert.deepEqual(use.input, { city: "Paris" });
    assert.ok(events.some(e => e.type === "content_block_delta" && e.delta.type === "input_json_delta"));
    checkEOC(events);
  });

  await check("countTokens says it is an estimate", async () => {
    const { data, response } = await client.messages
      .countTokens({ model, system: "Be brief.", messages: [{ role: "user", content: "How many tokens is this?" }] })
      .withResponse();
    assert.ok(Number.isInteger(data.input_tokens) && data.input_tokens > 0, JSON.stringify(data));
    assert.equal(response.headers.get("x-eoc-token-count"), "estimate");
  });

  await check("an unknown model is a NotFoundError in Anthropic's shape", async () => {
    await assert.rejects(client.messages.create({ model: "no-such-model", max_tokens: 4, messages: [{ role: "user", content: "hi" }] }),
      err => {
        assert.ok(err instanceof sdk.NotFoundError, `${err.constructor.name} is not a NotFoundError`);
        assert.equal(err.status, 404);
        assert.equal(err.error?.type, "error");
        assert.equal(err.type, "not_found_error");
        return true;
      });
  });

  await check("a field the proxy cannot honour is a BadRequestError naming it", async () => {
    await assert.rejects(client.messages.create({ model, max_tokens: 4, top_k: 5, messages: [{ role: "user", content: "hi" }] }),
      err => {
        assert.ok(err instanceof sdk.BadRequestError, `${err.constructor.name} is not a BadRequestError`);
        assert.equal(err.type, "invalid_request_error");
        assert.match(err.apiMessage, /top_k/);
        return true;
      });
  });

  await check("a spent joule budget is a RateLimitError in Anthropic's shape", async () => {
    const poor = new sdk.Anthropic({ ...opts, apiKey: process.env.EOC_POOR_KEY });
    // The first call is admitted and spends more than the budget; one after it is refused.
    let refused = null;
    for (let i = 0; i < 3 && !refused; i++) {
      try {
        await poor.messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: prompt() }] });
      } catch (err) {
        refused = err;
      }
    }
    assert.ok(refused, "three calls on a spent budget were all answered");
    assert.ok(refused instanceof sdk.RateLimitError, `${refused.constructor.name}: ${refused.message}`);
    assert.equal(refused.status, 429);
    assert.equal(refused.error?.type, "error");
    assert.equal(refused.type, "rate_limit_error");
    assert.match(refused.apiMessage, /budget/);
  });

  await check("a wrong key is an AuthenticationError", async () => {
    const stranger = new sdk.Anthropic({ ...opts, apiKey: "sk-not-a-key" });
    await assert.rejects(stranger.messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: "hi" }] }),
      err => {
        assert.ok(err instanceof sdk.AuthenticationError, `${err.constructor.name} is not an AuthenticationError`);
        assert.equal(err.type, "authentication_error");
        return true;
      });
  });
}

main().catch(err => {
  console.error("FAIL:", err && err.stack ? err.stack : err);
  process.exit(1);
});

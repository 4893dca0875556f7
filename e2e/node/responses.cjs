// The official OpenAI Node SDK's Responses API against a running eoc-proxy (run by
// e2e/responses_test.go). Env: EOC_BASE_URL (the proxy, with /v1), EOC_MODEL (a real model),
// EOC_TOOLS_MODEL (a fake that always calls get_weather), EOC_TEXT_MODEL (a fake that answers
// EOC_TEXT_REPLY), EOC_KEY, EOC_OTHER_KEY (another tenant), EOC_BROKE_KEY (a key whose joule
// budget one call spends), EOC_E2E_NODE_MODULES. Prints "ok - CHECK" per check; exits 1 at the
// first failure; prints "tool call_id ID" for the Go side.
"use strict";
const assert = require("node:assert/strict");
const path = require("node:path");

const sdk = require(path.join(process.env.EOC_E2E_NODE_MODULES, "openai"));
const { OpenAI } = sdk;
const env = process.env;
const model = env.EOC_MODEL;
const opts = { baseURL: env.EOC_BASE_URL, maxRetries: 0, timeout: 120_000 };
const client = new OpenAI({ ...opts, apiKey: env.EOC_KEY });
const other = new OpenAI({ ...opts, apiKey: env.EOC_OTHER_KEY });
const broke = new OpenAI({ ...opts, apiKey: env.EOC_BROKE_KEY });

const weatherTool = {
  type: "function", name: "get_weather", description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }, strict: false,
};

function prompt() {
  return Array.from({ length: 8 }, () => Math.random().toString(36).slice(2, 8)).join(" ");
}

// checkHeaders asserts the X-EOC headers of a whole answer and returns its joules.
function checkHeaders(response, stage) {
  assert.equal(response.status, 200);
  const joules = Number(response.headers.get("x-eoc-joules"));
  assert.ok(Number.isFinite(joules) && joules >= 0, `X-EOC-Joules ${response.headers.get("x-eoc-joules")}`);
  assert.equal(response.headers.get("x-eoc-stage"), stage);
  assert.match(response.headers.get("x-eoc-receipt") || "", /^[0-9a-f]{16,}$/);
  return joules;
}

function checkResponse(r) {
  assert.equal(r.object, "response");
  assert.match(r.id, /^resp_/);
  assert.ok(["completed", "incomplete"].includes(r.status), `status ${r.status}`);
  assert.equal(typeof r.output_text, "string");
  assert.ok(r.usage && r.usage.output_tokens > 0 && r.usage.total_tokens >= r.usage.output_tokens, `usage ${JSON.stringify(r.usage)}`);
}

async function check(name, fn) {
  await fn();
  console.log("ok - " + name);
}

async function main() {
  const question = prompt();
  let first;

  await check("responses.create whole: a Response with output_text and the X-EOC headers", async () => {
    const { data, response } = await client.responses
      .create({ model, input: question, instructions: "Answer briefly.", max_output_tokens: 16 })
      .withResponse();
    const joules = checkHeaders(response, "neural");
    assert.ok(joules > 0, `X-EOC-Joules ${joules}`);
    checkResponse(data);
    const msg = data.output.find(o => o.type === "message");
    assert.ok(msg && msg.content[0].type === "output_text", JSON.stringify(data.output));
    assert.equal(data.output_text, msg.content[0].text);
    assert.equal(data.instructions, "Answer briefly.");
    assert.equal(data.store, true);
    first = data;
  });

  await check("the same request again is answered by the cache", async () => {
    const { data, response } = await client.responses
      .create({ model, input: question, instructions: "Answer briefly.", max_output_tokens: 16 })
      .withResponse();
    checkHeaders(response, "cache");
    assert.notEqual(data.id, first.id);
    assert.equal(data.output_text, first.output_text);
  });

  await check("responses.stream: typed events and finalResponse() with usage and the eoc figures", async () => {
    const stream = client.responses.stream({ model, input: prompt(), max_output_tokens: 16 });
    const types = new Set();
    let text = "";
    stream.on("event", e => types.add(e.type));
    stream.on("response.output_text.delta", e => { text += e.delta; });
    const final = await stream.finalResponse();
    for (const t of ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done"]) {
      assert.ok(types.has(t), `no ${t} event in ${[...types]}`);
    }
    assert.ok(types.has("response.completed") || types.has("response.incomplete"), `no closing event in ${[...types]}`);
    checkResponse(final);
    assert.equal(final.output_text, text);
    // The figures travel as trailers (which fetch does not expose) and in the last event.
    assert.ok(final.eoc && final.eoc.joules > 0, `eoc ${JSON.stringify(final.eoc)}`);
    assert.equal(final.eoc.stage, "neural");
    assert.match(final.eoc.receipt, /^[0-9a-f]{16,}$/);
  });

  await check("a two-turn conversation by previous_response_id", async () => {
    const one = await client.responses.create({ model, input: "My name is " + prompt(), max_output_tokens: 8 });
    const { data: two, response } = await client.responses
      .create({ model, previous_response_id: one.id, input: "What is my name?", max_output_tokens: 8 })
      .withResponse();
    checkHeaders(response, "neural");
    checkResponse(two);
    assert.equal(two.previous_response_id, one.id);
    // A third turn continues the second, streamed.
    const final = await client.responses
      .stream({ model, previous_response_id: two.id, input: "Say it again.", max_output_tokens: 8 })
      .finalResponse();
    assert.equal(final.previous_response_id, two.id);
    checkResponse(final);
  });

  await check("a function tool round trip (a fake that calls get_weather, then one that answers)", async () => {
    const { data: call, response } = await client.responses
      .create({ model: env.EOC_TOOLS_MODEL, input: "What is the weather in Paris?", tools: [weatherTool] })
      .withResponse();
    checkHeaders(response, "neural");
    const fc = call.output.find(o => o.type === "function_call");
    assert.ok(fc, `no function_call in ${JSON.stringify(call.output)}`);
    assert.equal(fc.name, "get_weather");
    assert.equal(fc.status, "completed");
    assert.deepEqual(JSON.parse(fc.arguments), { city: "Paris" });
    assert.equal(call.tools[0].name, "get_weather");
    const { data: answer } = await client.responses
      .create({ model: env.EOC_TEXT_MODEL, previous_response_id: call.id, tools: [weatherTool],
        input: [{ type: "function_call_output", call_id: fc.call_id, output: JSON.stringify({ sky: "sunny" }) }] })
      .withResponse();
    assert.equal(answer.output_text, env.EOC_TEXT_REPLY);
    console.log("tool call_id " + fc.call_id);
  });

  await check("a streamed tool call: function_call_arguments events and the item in finalResponse()", async () => {
    const stream = client.responses.stream({ model: env.EOC_TOOLS_MODEL, input: "Weather in " + prompt() + "?", tools: [weatherTool] });
    let args = "";
    let done = null;
    stream.on("response.function_call_arguments.delta", e => { args += e.delta; });
    stream.on("response.function_call_arguments.done", e => { done = e; });
    const final = await stream.finalResponse();
    const fc = final.output.find(o => o.type === "function_call");
    assert.ok(fc, JSON.stringify(final.output));
    assert.equal(fc.arguments, args);
    assert.ok(done && done.arguments === args && done.name === "get_weather", JSON.stringify(done));
    assert.deepEqual(JSON.parse(args), { city: "Paris" });
  });

  await check("responses.retrieve gives the stored response; another key gets a NotFoundError", async () => {
    const { data, response } = await client.responses.retrieve(first.id).withResponse();
    assert.equal(response.status, 200);
    assert.equal(data.id, first.id);
    assert.equal(data.output_text, first.output_text);
    assert.deepEqual(data.usage, first.usage);
    await assert.rejects(other.responses.retrieve(first.id), err => {
      assert.ok(err instanceof sdk.NotFoundError, `${err.constructor.name} is not a NotFoundError`);
      assert.equal(err.status, 404);
      assert.equal(err.type, "invalid_request_error");
      return true;
    });
  });

  await check("responses.delete, then retrieve is a NotFoundError", async () => {
    await assert.rejects(other.responses.delete(first.id), err => err instanceof sdk.NotFoundError);
    await client.responses.delete(first.id);
    await assert.rejects(client.responses.retrieve(first.id), err => err instanceof sdk.NotFoundError && err.status === 404);
    await assert.rejects(client.responses.delete(first.id), err => err instanceof sdk.NotFoundError);
  });

  await check("store: false keeps nothing", async () => {
    const r = await client.responses.create({ model: env.EOC_TEXT_MODEL, input: prompt(), store: false });
    assert.equal(r.store, false);
    await assert.rejects(client.responses.retrieve(r.id), err => err instanceof sdk.NotFoundError);
    await assert.rejects(
      client.responses.create({ model: env.EOC_TEXT_MODEL, previous_response_id: r.id, input: "x" }),
      err => err instanceof sdk.NotFoundError && err.param === "previous_response_id");
  });

  await check("a built-in tool is a BadRequestError naming the field", async () => {
    await assert.rejects(
      client.responses.create({ model, input: "x", tools: [{ type: "web_search" }] }),
      err => {
        assert.ok(err instanceof sdk.BadRequestError, `${err.constructor.name} is not a BadRequestError`);
        assert.equal(err.status, 400);
        assert.equal(err.param, "tools[0].type");
        return true;
      });
    await assert.rejects(client.responses.create({ model, input: "x", background: true }),
      err => err instanceof sdk.BadRequestError && err.param === "background");
  });

  await check("a spent joule budget refuses in OpenAI's error shape (RateLimitError)", async () => {
    // The first call may be admitted before the key's spend is known; one call spends the budget.
    let refused = null;
    for (let i = 0; i < 3 && !refused; i++) {
      try {
        await broke.responses.create({ model: env.EOC_TEXT_MODEL, input: prompt() });
      } catch (err) {
        refused = err;
      }
    }
    assert.ok(refused, "three calls passed a budget that one call spends");
    assert.ok(refused instanceof sdk.RateLimitError, `${refused.constructor.name}: ${refused.message}`);
    assert.equal(refused.status, 429);
    assert.equal(refused.type, "insufficient_quota");
    assert.equal(refused.code, "joule_budget_exceeded");
    assert.ok(refused.headers.get("x-eoc-budget-remaining") !== null, "no X-EOC-Budget-Remaining on the refusal");
  });
}

main().catch(err => {
  console.error("FAIL:", err && err.stack ? err.stack : err);
  process.exit(1);
});

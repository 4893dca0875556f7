// The OpenAI Node SDK's legacy completions.create against a running eoc-proxy's
// POST /v1/completions (run by e2e/messages_test.go). Env: EOC_BASE_URL (the proxy, with /v1),
// EOC_MODEL, EOC_KEY (a key without a budget), EOC_POOR_KEY (a key whose joule budget one call
// spends), EOC_E2E_NODE_MODULES (where `npm ci` put the SDK).
// Prints "ok - CHECK" per check; exits 1 at the first failure.
"use strict";
const assert = require("node:assert/strict");
const path = require("node:path");

const sdk = require(path.join(process.env.EOC_E2E_NODE_MODULES, "openai"));
const model = process.env.EOC_MODEL;
const opts = { baseURL: process.env.EOC_BASE_URL, maxRetries: 0, timeout: 120_000 };
const client = new sdk.OpenAI({ ...opts, apiKey: process.env.EOC_KEY });

function prompt() {
  return Array.from({ length: 8 }, () => Math.random().toString(36).slice(2, 8)).join(" ");
}

async function check(name, fn) {
  await fn();
  console.log("ok - " + name);
}

function checkHeaders(response, stage) {
  const joules = Number(response.headers.get("x-eoc-joules"));
  assert.ok(Number.isFinite(joules) && joules > 0, `X-EOC-Joules ${response.headers.get("x-eoc-joules")}`);
  assert.equal(response.headers.get("x-eoc-stage"), stage);
  assert.match(response.headers.get("x-eoc-receipt") || "", /^[0-9a-f]{16,}$/);
}

// read iterates a stream: its text, finish reason, usage and eoc figures.
async function read(stream) {
  let text = "", finish = null, usage = null, eoc = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    assert.equal(ch.object, "text_completion");
    assert.match(ch.id, /^cmpl-/);
    for (const c of ch.choices) {
      text += c.text;
      finish = c.finish_reason ?? finish;
    }
    if (ch.usage) usage = ch.usage;
    if (ch.eoc) eoc = ch.eoc;
  }
  return { text, finish, usage, eoc, chunks };
}

async function main() {
  const repeat = { model, prompt: prompt(), max_tokens: 8 };
  let first;

  await check("completions.create gives a text_completion and the X-EOC headers", async () => {
    const { data, response } = await client.completions.create(repeat).withResponse();
    checkHeaders(response, "neural");
    assert.equal(data.object, "text_completion");
    assert.match(data.id, /^cmpl-/);
    assert.equal(data.choices.length, 1);
    assert.equal(typeof data.choices[0].text, "string");
    assert.equal(data.choices[0].logprobs, null);
    assert.ok(["stop", "length"].includes(data.choices[0].finish_reason), data.choices[0].finish_reason);
    assert.ok(data.usage.completion_tokens > 0, JSON.stringify(data.usage));
    first = data;
  });

  await check("a repeat is answered by the cache", async () => {
    const { data, response } = await client.completions.create(repeat).withResponse();
    checkHeaders(response, "cache");
    assert.equal(data.choices[0].text, first.choices[0].text);
  });

  await check("a stream ends with the eoc chunk", async () => {
    const { data: stream, response } = await client.completions
      .create({ model, prompt: prompt(), max_tokens: 8, stream: true }).withResponse();
    assert.equal(response.headers.get("x-eoc-stage"), "neural");
    const s = await read(stream);
    assert.ok(s.chunks > 2, `${s.chunks} chunks`);
    assert.ok(s.text.length > 0);
    assert.ok(["stop", "length"].includes(s.finish), `finish_reason ${s.finish}`);
    assert.equal(s.usage, null, "a usage chunk nobody asked for");
    assert.ok(s.eoc && s.eoc.joules > 0, `eoc ${JSON.stringify(s.eoc)}`);
    assert.match(s.eoc.receipt, /^[0-9a-f]{16,}$/);
  });

  await check("a stream with include_usage has a usage chunk", async () => {
    const stream = await client.completions.create({ model, prompt: prompt(), max_tokens: 8, stream: true,
      stream_options: { include_usage: true } });
    const s = await read(stream);
    assert.ok(s.usage && s.usage.completion_tokens > 0, `usage ${JSON.stringify(s.usage)}`);
  });

  await check("suffix is a BadRequestError naming it", async () => {
    await assert.rejects(client.completions.create({ model, prompt: "def f(", suffix: "return 1" }), err => {
      assert.ok(err instanceof sdk.BadRequestError, `${err.constructor.name} is not a BadRequestError`);
      assert.equal(err.param, "suffix");
      return true;
    });
  });

  await check("several prompts are a BadRequestError naming prompt", async () => {
    await assert.rejects(client.completions.create({ model, prompt: ["one", "two"] }), err => {
      assert.ok(err instanceof sdk.BadRequestError, `${err.constructor.name} is not a BadRequestError`);
      assert.equal(err.param, "prompt");
      return true;
    });
  });

  await check("a spent joule budget is a RateLimitError in OpenAI's shape", async () => {
    const poor = new sdk.OpenAI({ ...opts, apiKey: process.env.EOC_POOR_KEY });
    // The first call is admitted and spends more than the budget; one after it is refused.
    let refused = null;
    for (let i = 0; i < 3 && !refused; i++) {
      try {
        await poor.completions.create({ model, prompt: prompt(), max_tokens: 4 });
      } catch (err) {
        refused = err;
      }
    }
    assert.ok(refused, "three calls on a spent budget were all answered");
    assert.ok(refused instanceof sdk.RateLimitError, `${refused.constructor.name}: ${refused.message}`);
    assert.equal(refused.status, 429);
    assert.equal(refused.type, "insufficient_quota");
    assert.equal(refused.code, "joule_budget_exceeded");
    assert.match(refused.message, /budget/);
    assert.ok(refused.headers.get("x-eoc-budget-remaining") !== null, "no X-EOC-Budget-Remaining on the refusal");
  });
}

main().catch(err => {
  console.error("FAIL:", err && err.stack ? err.stack : err);
  process.exit(1);
});

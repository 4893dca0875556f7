// The official OpenAI Node SDK against a running eoc-proxy (run by e2e/node_test.go).
// Env: EOC_BASE_URL (the proxy, with /v1), EOC_MODEL, EOC_E2E_NODE_MODULES (where `npm ci` put
// the SDK). Prints "ok - CHECK" per check; exits 1 at the first failure.
"use strict";
const assert = require("node:assert/strict");
const path = require("node:path");

const modules = process.env.EOC_E2E_NODE_MODULES;
const sdk = require(path.join(modules, "openai"));
const OpenAI = sdk.OpenAI;
const model = process.env.EOC_MODEL;
const client = new OpenAI({ baseURL: process.env.EOC_BASE_URL, apiKey: "unused", maxRetries: 0, timeout: 120_000 });

function prompt() {
  return Array.from({ length: 8 }, () => Math.random().toString(36).slice(2, 8)).join(" ");
}

// closedCalls is the proxy's count of calls whose client left (status 499), from /metrics.
async function closedCalls() {
  const base = process.env.EOC_BASE_URL.replace(/\/v1$/, "");
  const text = await (await fetch(base + "/metrics")).text();
  let n = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith("eoc_requests_total{") && line.includes('status="499"')) n += Number(line.split(" ").pop());
  }
  return n;
}

async function check(name, fn) {
  await fn();
  console.log("ok - " + name);
}

async function main() {
  await check("models.list names the model", async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.ok(ids.some(id => id === model || id === model + ":latest"), `models ${ids} lack ${model}`);
  });

  await check("withResponse() gives the X-EOC headers", async () => {
    const { data, response } = await client.chat.completions
      .create({ model, messages: [{ role: "user", content: prompt() }], max_tokens: 8 })
      .withResponse();
    assert.equal(response.status, 200);
    const joules = Number(response.headers.get("x-eoc-joules"));
    assert.ok(Number.isFinite(joules) && joules > 0, `X-EOC-Joules ${response.headers.get("x-eoc-joules")}`);
    assert.equal(response.headers.get("x-eoc-stage"), "neural");
    assert.match(response.headers.get("x-eoc-receipt") || "", /^[0-9a-f]{16,}$/);
    assert.ok(["measured", "estimated"].includes(response.headers.get("x-eoc-energy")));
    assert.equal(data.object, "chat.completion");
    assert.ok(data.choices.length === 1 && typeof data.choices[0].message.content === "string");
    assert.ok(data.usage.completion_tokens > 0);
  });

  await check("stream with include_usage ends with a usage chunk", async () => {
    const { data: stream, response } = await client.chat.completions
      .create({ model, messages: [{ role: "user", content: prompt() }], max_tokens: 8, stream: true,
        stream_options: { include_usage: true } })
      .withResponse();
    assert.equal(response.headers.get("x-eoc-stage"), "neural");
    let text = "", usage = null, finish = null, chunks = 0;
    for await (const ch of stream) {
      chunks++;
      for (const c of ch.choices) {
        text += c.delta?.content ?? "";
        finish = c.finish_reason ?? finish;
      }
      if (ch.usage) usage = ch.usage;
    }
    assert.ok(chunks > 1, `${chunks} chunks`);
    assert.ok(finish === "stop" || finish === "length", `finish_reason ${finish}`);
    assert.ok(usage && usage.completion_tokens > 0, `usage ${JSON.stringify(usage)}`);
  });

  await check("a request aborted before it is sent rejects, and the next call is answered", async () => {
    const gone = new AbortController();
    gone.abort();
    await assert.rejects(
      client.chat.completions.create({ model, messages: [{ role: "user", content: prompt() }], max_tokens: 4 }, { signal: gone.signal }),
      err => err instanceof sdk.APIUserAbortError);
    const again = await client.chat.completions.create({ model, messages: [{ role: "user", content: prompt() }], max_tokens: 4 });
    assert.equal(again.choices.length, 1);
  });

  // The last check that asks the model: Ollama 0.17.4 can leak the model's only slot when a
  // client leaves mid-stream (ollama/ollama#17131), and the model then answers nothing more on
  // this server. The checks after it do not reach the model.
  await check("abort mid-stream ends the stream and the proxy records a client that left", async () => {
    // The SDK ends a stream its caller aborted without throwing (its Stream swallows the
    // AbortError). The model would generate for minutes: the stream must end well before, with
    // no finish_reason, and the proxy must count the call as 499 (client closed).
    const before = await closedCalls();
    const ac = new AbortController();
    const stream = await client.chat.completions.create(
      { model, messages: [{ role: "user", content: prompt() }], max_tokens: 100000, stream: true },
      { signal: ac.signal });
    let seen = 0, finish = null;
    const t0 = Date.now();
    for await (const ch of stream) {
      if (++seen === 3) ac.abort();
      for (const c of ch.choices) finish = c.finish_reason ?? finish;
    }
    assert.ok(ac.signal.aborted, "the stream ended before the abort");
    assert.equal(finish, null);
    assert.ok(Date.now() - t0 < 30_000);
    // The proxy settles the call once it sees the client gone; on a loaded machine that can take
    // seconds, so the wait only bounds a hang (30 s), it times nothing.
    let after = before;
    for (let i = 0; i < 300 && after === before; i++) {
      await new Promise(r => setTimeout(r, 100));
      after = await closedCalls();
    }
    assert.equal(after, before + 1, "eoc_requests_total{status=\"499\"} did not count the abort");
  });

  await check("an unknown model is a NotFoundError", async () => {
    await assert.rejects(
      client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] }),
      err => {
        assert.ok(err instanceof sdk.NotFoundError, `${err.constructor.name} is not a NotFoundError`);
        assert.equal(err.status, 404);
        // Every model routes to Ollama here ("*"), so the 404 is Ollama's, passed through.
        assert.match(err.message, /no-such-model/);
        return true;
      });
  });

  await check("a bad parameter is a BadRequestError naming it", async () => {
    await assert.rejects(
      client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], temperature: 3 }),
      err => {
        assert.ok(err instanceof sdk.BadRequestError, `${err.constructor.name} is not a BadRequestError`);
        assert.equal(err.status, 400);
        assert.equal(err.param, "temperature");
        return true;
      });
  });
}

main().catch(err => {
  console.error("FAIL:", err && err.stack ? err.stack : err);
  process.exit(1);
});

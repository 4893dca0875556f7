// Serves the file argv[2] as the answer to POST /v1/responses on a loopback port and reads it
// with openai-node (node_modules argv[3]): with client.responses.stream(...).finalResponse()
// when the file is a stream (.sse), else with client.responses.create(...). Prints what the
// SDK made of it as JSON.
"use strict";
const fs = require("node:fs");
const http = require("node:http");
const path = require("node:path");
const { OpenAI } = require(path.join(process.argv[3], "openai"));

const file = process.argv[2];
const isStream = file.endsWith(".sse");
const body = fs.readFileSync(file);

async function main() {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": isStream ? "text/event-stream" : "application/json" });
      res.end(body);
    });
  });
  await new Promise(r => server.listen(0, "127.0.0.1", r));
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${server.address().port}/v1`, apiKey: "x", maxRetries: 0 });
  try {
    if (isStream) {
      const stream = client.responses.stream({ model: "m", input: "hi" });
      const deltas = [];
      stream.on("response.output_text.delta", e => deltas.push(e.snapshot));
      const final = await stream.finalResponse();
      process.stdout.write(JSON.stringify({ final, deltas }));
    } else {
      const final = await client.responses.create({ model: "m", input: "hi" });
      process.stdout.write(JSON.stringify({ final, deltas: [] }));
    }
  } finally {
    server.close();
  }
}
main().catch(err => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});

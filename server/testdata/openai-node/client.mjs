// Drives a turnstile server with the official OpenAI Node.js client.
// Usage: TURNSTILE_URL=http://127.0.0.1:PORT/v1 TURNSTILE_KEY=... TURNSTILE_MODEL=... node client.mjs
// Prints one JSON object with what it observed; exits non-zero on a failed check.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const baseURL = process.env.TURNSTILE_URL;
const model = process.env.TURNSTILE_MODEL;
const client = new OpenAI({ baseURL, apiKey: process.env.TURNSTILE_KEY, maxRetries: 0 });
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const prompt = 'Once upon a time';
const comp = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0 });
out.completion = comp.choices[0].text;
out.completionUsage = comp.usage;

let streamed = '';
let finish = null;
const cs = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0, stream: true });
for await (const chunk of cs) {
  for (const c of chunk.choices) {
    streamed += c.text;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(streamed, out.completion, 'streamed completion == whole completion');
out.completionStreamFinish = finish;

const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me about a cat.' }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
out.chat = chat.choices[0].message.content;
out.chatRole = chat.choices[0].message.role;

let chatStreamed = '';
let usage = null;
const ss = await client.chat.completions.create({
  model, messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
});
for await (const chunk of ss) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) chatStreamed += c.delta?.content ?? '';
}
assert.equal(chatStreamed, out.chat, 'streamed chat == whole chat');
out.chatStreamUsage = usage;

try {
  await client.completions.create({ model, prompt, max_tokens: 0 });
  assert.fail('max_tokens 0 was accepted');
} catch (e) {
  assert.ok(e instanceof OpenAI.BadRequestError, `expected BadRequestError, got ${e}`);
  out.badRequest = { status: e.status, type: e.error?.type, param: e.error?.param };
}

try {
  await client.completions.create({ model: 'no-such-model', prompt, max_tokens: 2 });
  assert.fail('an unknown model was accepted');
} catch (e) {
  assert.ok(e instanceof OpenAI.NotFoundError, `expected NotFoundError, got ${e}`);
  out.notFound = e.status;
}

const wrongKey = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
try {
  await wrongKey.models.list();
  assert.fail('a wrong key was accepted');
} catch (e) {
  assert.ok(e instanceof OpenAI.AuthenticationError, `expected AuthenticationError, got ${e}`);
  out.unauthorized = e.status;
}

console.log(JSON.stringify(out));

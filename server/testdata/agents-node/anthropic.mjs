// Anthropic's Messages API through the official Anthropic TypeScript SDK
// (@anthropic-ai/sdk): text whole and streamed (the SDK's stream helper
// and create({stream: true})), a forced tool_use block checked with ajv
// (its streamed input assembled from input_json_delta), the tool's result
// sent back, and an error mapped to the SDK's class.
import Anthropic from '@anthropic-ai/sdk';
import { env, check, scenario, report, noThinking, weatherSchema } from './common.mjs';

const client = new Anthropic({ baseURL: env.url, apiKey: env.key, maxRetries: 0 });
const base = { model: env.model, system: 'You are a helpful assistant.', ...noThinking.messages };

function summary(m) {
  return {
    id: m.id, type: m.type, role: m.role, model: m.model, stop_reason: m.stop_reason, stop_sequence: m.stop_sequence,
    content: m.content.map((b) => ({ type: b.type, text: b.text, id: b.id, name: b.name, input: b.input })),
    usage: m.usage,
  };
}

// streamed runs body through create({stream: true}): the events' types,
// the text and each tool_use block's input_json_delta pieces joined, and
// the message assembled by hand from the events.
async function rawStream(body) {
  const s = await client.messages.create({ ...body, stream: true });
  const types = [];
  const blocks = [];
  let message = null;
  for await (const ev of s) {
    types.push(ev.type);
    switch (ev.type) {
      case 'message_start': message = ev.message; break;
      case 'content_block_start': blocks[ev.index] = { ...ev.content_block, json: '' }; break;
      case 'content_block_delta':
        if (ev.delta.type === 'text_delta') blocks[ev.index].text += ev.delta.text;
        if (ev.delta.type === 'input_json_delta') blocks[ev.index].json += ev.delta.partial_json;
        break;
      case 'message_delta': message = { ...message, ...ev.delta, usage: { ...message.usage, ...ev.usage } }; break;
    }
  }
  return { types, blocks, message };
}

const textBody = { ...base, max_tokens: 16, temperature: 0, messages: [{ role: 'user', content: 'Tell me a short story about a cat.' }] };
await scenario('text', async () => {
  const whole = await client.messages.create(textBody);
  // The SDK's stream helper.
  const s = client.messages.stream(textBody);
  let deltas = '';
  s.on('text', (d) => { deltas += d; });
  const helper = await s.finalMessage();
  const raw = await rawStream(textBody);
  return {
    whole: summary(whole), stream: { ...summary(helper), deltas },
    raw: { types: [...new Set(raw.types)], first: raw.types[0], last: raw.types.at(-1), text: raw.blocks.map((b) => b.text).join(''), stop_reason: raw.message.stop_reason, usage: raw.message.usage },
  };
});

const tools = [{ name: 'get_weather', description: 'The weather in a city', input_schema: weatherSchema }];
const question = [{ role: 'user', content: 'What is the weather in Paris?' }];
for (const [choice, tool_choice] of [['tool', { type: 'tool', name: 'get_weather' }], ['any', { type: 'any', disable_parallel_tool_use: true }]]) {
  await scenario(`tool/${choice}`, async () => {
    const body = { ...base, max_tokens: 300, temperature: 1, tools, tool_choice, messages: question };
    const whole = await client.messages.create(body);
    const helper = await client.messages.stream(body).finalMessage();
    const raw = await rawStream(body);
    const uses = (m) => m.content.filter((b) => b.type === 'tool_use');
    const rawUses = raw.blocks.filter((b) => b.type === 'tool_use');
    const result = {
      whole: { ...summary(whole), checks: uses(whole).map((b) => check(weatherSchema, b.input)) },
      stream: { ...summary(helper), checks: uses(helper).map((b) => check(weatherSchema, b.input)) },
      raw: {
        stop_reason: raw.message.stop_reason, types: [...new Set(raw.types)],
        uses: rawUses.map((b) => ({ id: b.id, name: b.name, json: b.json, check: check(weatherSchema, b.json) })),
      },
    };
    // The call's result sent back.
    const use = uses(whole)[0];
    if (use) {
      const second = await client.messages.create({
        ...base, max_tokens: 16, temperature: 1, tools,
        messages: [...question, { role: 'assistant', content: whole.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: JSON.stringify({ temperature: 21, unit: 'c' }) }] }],
      });
      result.second = summary(second);
    }
    return result;
  });
}

await scenario('errors', async () => {
  const out = {};
  try {
    await client.messages.create({ ...textBody, model: 'no-such-model' });
    out.notFound = 'accepted';
  } catch (e) {
    out.notFound = { class: e.constructor.name, status: e.status, body: e.error };
  }
  try {
    await new Anthropic({ baseURL: env.url, apiKey: 'wrong', maxRetries: 0 }).messages.create(textBody);
    out.unauthorized = 'accepted';
  } catch (e) {
    out.unauthorized = { class: e.constructor.name, status: e.status, body: e.error };
  }
  try {
    await client.messages.create({ ...textBody, max_tokens: 0 });
    out.badRequest = 'accepted';
  } catch (e) {
    out.badRequest = { class: e.constructor.name, status: e.status, body: e.error };
  }
  return out;
});
report();

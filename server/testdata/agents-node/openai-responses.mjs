// The Responses API through the official OpenAI Node.js client: text
// whole and streamed (the client's stream accumulator), structured output
// (text.format json_schema) and a required function tool checked with ajv,
// and turns continued with previous_response_id.
import OpenAI from 'openai';
import { env, check, scenario, report, noThinking, weatherSchema } from './common.mjs';

const client = new OpenAI({ baseURL: `${env.url}/v1`, apiKey: env.key, maxRetries: 0 });
const base = { model: env.model, instructions: 'You are a helpful assistant.', ...noThinking.responses };

// streamed runs body through the client's stream helper: the event types
// in order, the text deltas, and the response it assembled.
async function streamed(body) {
  const s = client.responses.stream(body);
  const types = [];
  let deltas = '';
  let args = '';
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
  }
  const final = await s.finalResponse();
  return { final, types, deltas, args };
}

// summary is what the Go test checks of a response.
function summary(r) {
  return {
    id: r.id, object: r.object, status: r.status, model: r.model, text: r.output_text,
    items: r.output.map((it) => ({ type: it.type, role: it.role, status: it.status, name: it.name, call_id: it.call_id, arguments: it.arguments })),
    usage: r.usage, incomplete: r.incomplete_details,
  };
}

// Text: the same request (temperature 0, the same seed: a member the
// Responses API does not define, sent anyway) whole and streamed.
const textBody = { ...base, input: 'Tell me a short story about a cat.', temperature: 0, seed: 7, max_output_tokens: 16 };
await scenario('text', async () => {
  const whole = await client.responses.create(textBody);
  const s = await streamed(textBody);
  return { whole: summary(whole), stream: { ...summary(s.final), deltas: s.deltas, first: s.types[0], last: s.types.at(-1), types: [...new Set(s.types)] } };
});

// Structured output: output_text validates against the schema.
const citySchema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 10 }, rating: { type: 'integer', minimum: 1, maximum: 5 }, sunny: { type: 'boolean' } },
  required: ['city', 'rating', 'sunny'],
  additionalProperties: false,
};
for (const stream of [false, true]) {
  await scenario(`json_schema/${stream ? 'stream' : 'whole'}`, async () => {
    const body = {
      ...base, input: 'Rate a city.', temperature: 1, max_output_tokens: 300,
      text: { format: { type: 'json_schema', name: 'city_rating', schema: citySchema, strict: true } },
    };
    const r = stream ? (await streamed(body)).final : await client.responses.create(body);
    return { ...summary(r), check: check(citySchema, r.output_text) };
  });
}

// A required function tool, one call (parallel_tool_calls false: random
// sampling would otherwise go on calling until max_output_tokens): the
// output holds a function_call item whose arguments validate.
const tools = [{ type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: weatherSchema, strict: false }];
for (const choice of ['required', 'named']) {
  for (const stream of [false, true]) {
    await scenario(`tool/${choice}/${stream ? 'stream' : 'whole'}`, async () => {
      const body = {
        ...base, input: 'What is the weather in Paris?', tools, temperature: 1, max_output_tokens: 300,
        tool_choice: choice === 'named' ? { type: 'function', name: 'get_weather' } : 'required', parallel_tool_calls: false,
      };
      let r, args = null;
      if (stream) ({ final: r, args } = await streamed(body));
      else r = await client.responses.create(body);
      const calls = r.output.filter((it) => it.type === 'function_call');
      return { ...summary(r), streamedArgs: args, checks: calls.map((c) => check(weatherSchema, c.arguments)) };
    });
  }
}

// Turns continued with previous_response_id: a text turn, and a tool
// call's result sent back as a function_call_output item.
await scenario('continue/text', async () => {
  const first = await client.responses.create({ ...base, input: 'Tell me a short story about a cat.', max_output_tokens: 16 });
  const second = await client.responses.create({ ...base, input: 'And then?', previous_response_id: first.id, max_output_tokens: 16 });
  return { first: summary(first), second: { ...summary(second), previous: second.previous_response_id } };
});
await scenario('continue/tool', async () => {
  const first = await client.responses.create({ ...base, input: 'What is the weather in Paris?', tools, tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 300 });
  const call = first.output.find((it) => it.type === 'function_call');
  const second = await client.responses.create({
    ...base, tools, previous_response_id: first.id, max_output_tokens: 16,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: JSON.stringify({ temperature: 21, unit: 'c' }) }],
  });
  return { first: summary(first), second: { ...summary(second), previous: second.previous_response_id } };
});
report();

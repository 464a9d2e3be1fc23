// Chat tool calls through the official OpenAI Node.js client: named and
// required tool choices, whole and streamed (the client's stream helper
// assembles the deltas), over several seeds at temperature 1; every call's
// arguments checked with ajv; then the conversation sent back with the
// calls and their results.
import OpenAI from 'openai';
import { env, check, scenario, report, noThinking, weatherSchema, timeSchema } from './common.mjs';

const client = new OpenAI({ baseURL: `${env.url}/v1`, apiKey: env.key, maxRetries: 0 });

const schemas = { get_weather: weatherSchema, get_time: timeSchema };
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: weatherSchema } },
  { type: 'function', function: { name: 'get_time', description: 'The time in a time zone', parameters: timeSchema } },
];
const messages = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'What is the weather in Paris, and the time in Tokyo?' },
];
const modes = {
  named: { tool_choice: { type: 'function', function: { name: 'get_weather' } } },
  required_one: { tool_choice: 'required', parallel_tool_calls: false },
  required: { tool_choice: 'required' },
};

for (const [mode, choice] of Object.entries(modes)) {
  for (const seed of env.seeds) {
    for (const stream of [false, true]) {
      await scenario(`${mode}/seed=${seed}/${stream ? 'stream' : 'whole'}`, async () => {
        const body = { model: env.model, messages, tools, ...choice, temperature: 1, seed, max_tokens: 160, ...noThinking.chat };
        const completion = stream
          ? await client.chat.completions.stream(body).finalChatCompletion()
          : await client.chat.completions.create(body);
        const ch = completion.choices[0];
        const calls = (ch.message.tool_calls ?? []).map((c, k) => {
          const cut = ch.finish_reason === 'length' && k === ch.message.tool_calls.length - 1;
          const res = cut ? { valid: null, errors: 'cut short by max_tokens' } : check(schemas[c.function.name] ?? false, c.function.arguments);
          return { id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments, valid: res.valid, errors: res.errors, cut };
        });
        const result = { finish: ch.finish_reason, content: ch.message.content, calls, usage: completion.usage };
        // The conversation sent back: the assistant's whole calls and a
        // result for each.
        const whole = ch.message.tool_calls?.filter((_, k) => !calls[k].cut) ?? [];
        if (whole.length) {
          const back = [
            ...messages,
            { role: 'assistant', content: ch.message.content ?? null, tool_calls: whole },
            ...whole.map((c) => ({ role: 'tool', tool_call_id: c.id, content: JSON.stringify({ ok: true, name: c.function.name }) })),
          ];
          const second = await client.chat.completions.create({
            model: env.model, messages: back, tools, temperature: 1, seed, max_tokens: 24, ...noThinking.chat,
          });
          result.roundTrip = { finish: second.choices[0].finish_reason, promptTokens: second.usage?.prompt_tokens };
        }
        return result;
      });
    }
  }
}
report();

// The OpenAI Agents SDK (@openai/agents) against the server through the
// Responses API (and once through chat completions): an agent with one function tool, forced on the first
// turn (toolChoice required; resetToolChoice then lets the model answer),
// run whole and streamed; the tool's invocations are recorded and their
// arguments checked with ajv.
import OpenAI from 'openai';
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled, OpenAIChatCompletionsModel } from '@openai/agents';
import { z } from 'zod';
import { env, check, scenario, report, weatherSchema } from './common.mjs';

const client = new OpenAI({ baseURL: `${env.url}/v1`, apiKey: env.key, maxRetries: 0 });
setDefaultOpenAIClient(client);
setOpenAIAPI('responses');
setTracingDisabled(true);

const settings = { toolChoice: 'required', parallelToolCalls: false, temperature: 1, maxTokens: 300 };
// Thinking off: the Responses API's reasoning effort none; chat
// completions' chat_template_kwargs, passed through providerData.
const responsesSettings = { ...settings, ...(env.thinks ? { reasoning: { effort: 'none' } } : {}) };
const chatSettings = { ...settings, ...(env.thinks ? { providerData: { chat_template_kwargs: { enable_thinking: false } } } : {}) };

// weatherTool returns a function tool recording its invocations in calls:
// the parameters as a zod schema (strict) or as JSON Schema (not strict).
function weatherTool(calls, zod) {
  const execute = async (input) => {
    calls.push(input);
    return JSON.stringify({ temperature: 21, unit: input.unit });
  };
  if (zod) {
    return tool({
      name: 'get_weather', description: 'The weather in a city',
      parameters: z.object({ city: z.string().max(12), unit: z.enum(['c', 'f']) }),
      execute,
    });
  }
  return tool({ name: 'get_weather', description: 'The weather in a city', parameters: weatherSchema, strict: false, execute });
}
// The zod tool's parameters as JSON Schema (the strict form: every
// property required).
const zodSchema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};

// The SDK's default model is the Responses API's (setOpenAIAPI above);
// the last run uses its chat completions model instead.
const chatModel = new OpenAIChatCompletionsModel(client, env.model);
for (const [name, zod, stream, chat] of [
  ['zod/whole', true, false, false], ['json/stream', false, true, false], ['chat_completions/stream', true, true, true],
]) {
  await scenario(name, async () => {
    const calls = [];
    const agent = new Agent({
      name: 'Weather', model: chat ? chatModel : env.model, instructions: 'You answer questions about the weather; use the tool.',
      tools: [weatherTool(calls, zod)], modelSettings: chat ? chatSettings : responsesSettings,
    });
    let result, events = 0;
    if (stream) {
      result = await run(agent, 'What is the weather in Paris?', { stream: true, maxTurns: 4 });
      for await (const _ of result) events++;
      await result.completed;
    } else {
      result = await run(agent, 'What is the weather in Paris?', { maxTurns: 4 });
    }
    return {
      calls: calls.map((c) => check(zod ? zodSchema : weatherSchema, c)),
      finalOutput: result.finalOutput,
      items: result.newItems.map((it) => it.type),
      responses: result.rawResponses.length,
      lastResponseId: result.lastResponseId,
      events,
    };
  });
}
report();

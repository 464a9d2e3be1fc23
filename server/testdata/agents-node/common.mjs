// Shared by the client scripts: the environment the Go test sets, a JSON
// Schema validator that is not turnstile's (ajv), and scenarios that
// record what they saw (or how they failed) instead of stopping the script.
import Ajv from 'ajv';

export const env = {
  // The server's root URL (no /v1).
  url: process.env.TURNSTILE_URL,
  key: process.env.TURNSTILE_KEY,
  model: process.env.TURNSTILE_MODEL,
  seeds: (process.env.TURNSTILE_SEEDS ?? '0,1,2').split(',').map(Number),
  // The template thinks unless told not to (Qwen3): each API's way of
  // turning thinking off goes into its requests (on random logits the
  // reasoning would never end).
  thinks: process.env.TURNSTILE_THINKS === '1',
  // Which scenarios to run (comma separated; empty: all).
  only: (process.env.TURNSTILE_ONLY ?? '').split(',').filter(Boolean),
};

// noThinking is each API's request member that turns thinking off, where
// the template thinks.
export const noThinking = {
  chat: env.thinks ? { chat_template_kwargs: { enable_thinking: false } } : {},
  responses: env.thinks ? { reasoning: { effort: 'none' } } : {},
  messages: env.thinks ? { thinking: { type: 'disabled' } } : {},
};

// The tools' parameters: schemas that keep random walks short (enums,
// small integers, short strings).
export const weatherSchema = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 12 },
    unit: { enum: ['c', 'f'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'unit'],
  additionalProperties: false,
};
export const timeSchema = {
  type: 'object',
  properties: { tz: { enum: ['UTC', 'CET', 'JST'] } },
  required: ['tz'],
  additionalProperties: false,
};

const ajv = new Ajv({ strict: false, allErrors: true });

// check validates value (a JSON text when it is a string) against schema:
// {valid, errors, value}.
export function check(schema, value) {
  let v = value;
  if (typeof value === 'string') {
    try {
      v = JSON.parse(value);
    } catch (e) {
      return { valid: false, errors: `not JSON: ${e.message}`, value };
    }
  }
  const validate = ajv.compile(schema);
  const valid = validate(v);
  return { valid, errors: valid ? null : ajv.errorsText(validate.errors), value: v };
}

// describe turns a thrown error into what a report needs: the client's
// class and message, the HTTP status, the error body, the stack's top.
export function describe(e) {
  return {
    class: e?.constructor?.name,
    message: String(e?.message ?? e),
    status: e?.status,
    body: e?.error,
    stack: String(e?.stack ?? '').split('\n').slice(0, 6).join('\n'),
  };
}

export const out = {};

// scenario runs fn and records its result (or its failure) under name.
export async function scenario(name, fn) {
  if (env.only.length && !env.only.some((o) => name.startsWith(o))) return;
  const started = Date.now();
  try {
    out[name] = { ...(await fn()), ms: Date.now() - started };
  } catch (e) {
    out[name] = { failed: describe(e), ms: Date.now() - started };
  }
}

export function report() {
  console.log(JSON.stringify(out));
}

// Structured output end to end with the official OpenAI Node client and a
// validator that is not turnstile's (Ajv, draft 2020-12, with formats).
// Usage: node structured-e2e.mjs BASE_URL  (scripts/structured-e2e.sh runs it)
import OpenAI from "openai";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const base = process.argv[2] ?? "http://127.0.0.1:8080";
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused" });
const ajv = new Ajv2020({ strict: false });
addFormats(ajv);

const schemas = {
  person: {
    type: "object",
    properties: {
      name: { type: "string", maxLength: 20 },
      age: { type: "integer", minimum: 0, maximum: 120 },
      email: { type: "string", format: "email" },
      tags: { type: "array", items: { type: "string", maxLength: 8 }, maxItems: 3 },
    },
    required: ["name", "age", "email", "tags"],
    additionalProperties: false,
  },
  event: {
    type: "object",
    properties: {
      title: { type: "string", pattern: "^[A-Z][a-z]+$" },
      when: { type: "string", format: "date" },
      kind: { enum: ["party", "meeting", "trip"] },
      guests: { type: "integer", minimum: 1, maximum: 9 },
    },
    required: ["title", "when", "kind", "guests"],
    additionalProperties: false,
  },
};

let failures = 0;
let checked = 0;
const fail = (what) => {
  failures++;
  console.log(`FAIL ${what}`);
};

async function ask(schema, name, seed, stream) {
  const params = {
    model: "stories260K",
    messages: [{ role: "user", content: "Tell me about a person." }],
    max_tokens: 200,
    temperature: 1,
    seed,
    response_format: { type: "json_schema", json_schema: { name, schema, strict: true } },
  };
  if (!stream) {
    const r = await client.chat.completions.create(params);
    return [r.choices[0].message.content, r.choices[0].finish_reason];
  }
  let text = "";
  let finish = null;
  for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) {
    const c = chunk.choices[0];
    if (c?.delta?.content) text += c.delta.content;
    if (c?.finish_reason) finish = c.finish_reason;
  }
  return [text, finish];
}

for (const [name, schema] of Object.entries(schemas)) {
  const validate = ajv.compile(schema);
  for (const seed of [1, 2, 3, 4, 5]) {
    for (const stream of [false, true]) {
      const [text, finish] = await ask(schema, name, seed, stream);
      checked++;
      const tag = `${name} seed=${seed} stream=${stream}`;
      if (finish !== "stop") {
        console.log(`note ${tag}: finish_reason ${finish} (cut by max_tokens): ${JSON.stringify(text)}`);
        continue;
      }
      let value;
      try {
        value = JSON.parse(text);
      } catch (e) {
        fail(`${tag}: not JSON: ${JSON.stringify(text)}`);
        continue;
      }
      if (!validate(value)) fail(`${tag}: ${ajv.errorsText(validate.errors)}: ${text}`);
      else console.log(`ok ${tag}: ${text}`);
    }
  }
}

// json_object gives an object.
for (const seed of [1, 2, 3]) {
  const r = await client.chat.completions.create({
    model: "stories260K",
    messages: [{ role: "user", content: "Answer in JSON." }],
    max_tokens: 120,
    temperature: 1,
    seed,
    response_format: { type: "json_object" },
  });
  checked++;
  const c = r.choices[0];
  if (c.finish_reason !== "stop") {
    console.log(`note json_object seed=${seed}: finish_reason ${c.finish_reason}`);
    continue;
  }
  let v;
  try {
    v = JSON.parse(c.message.content);
  } catch {
    fail(`json_object seed=${seed}: not JSON: ${JSON.stringify(c.message.content)}`);
    continue;
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) fail(`json_object seed=${seed}: not an object: ${c.message.content}`);
  else console.log(`ok json_object seed=${seed}: ${c.message.content}`);
}

// Invalid and unsupported schemas are 400s.
for (const [what, schema] of [
  ["invalid", { type: "objekt" }],
  ["unsupported", { type: "array", uniqueItems: true }],
]) {
  checked++;
  try {
    await client.chat.completions.create({
      model: "stories260K",
      messages: [{ role: "user", content: "x" }],
      max_tokens: 5,
      response_format: { type: "json_schema", json_schema: { name: what, schema } },
    });
    fail(`${what} schema: accepted`);
  } catch (e) {
    if (e.status === 400) console.log(`ok ${what} schema: 400 ${e.message}`);
    else fail(`${what} schema: ${e.status} ${e.message}`);
  }
}

console.log(`${checked} checks, ${failures} failures`);
process.exit(failures ? 1 : 0);

// Every REST answer the suite sees is checked against the document the
// gateway serves at /openapi.json (api() in stack.ts calls this), so the
// document cannot drift from the service.
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { expect } from "vitest";
import { WEBHOOKS } from "../../gateway/schemas.js";

type Doc = {
  paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema: object }>; headers?: Record<string, { required?: boolean }> }> }>>;
};

let loaded: Promise<{ doc: Doc; ajv: InstanceType<typeof Ajv2020>; routes: { pattern: RegExp; path: string }[] }> | undefined;

function load(gatewayUrl: string) {
  loaded ??= (async () => {
    const doc = (await (await fetch(`${gatewayUrl}/openapi.json`)).json()) as Doc;
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    (addFormats as unknown as (a: unknown) => void)(ajv);
    ajv.addSchema({ ...doc, $id: "openapi" });
    const routes = Object.keys(doc.paths).map((path) => ({
      path,
      pattern: new RegExp(`^${path.replace(/\{[^}]+\}/g, "[^/]+")}$`),
    }));
    return { doc, ajv, routes };
  })();
  return loaded;
}

const pointer = (...parts: string[]) => parts.map((p) => p.replace(/~/g, "~0").replace(/\//g, "~1")).join("/");

/**
 * Fails the test when a JSON answer does not match what the document says of
 * that path, method and status: its body, and the headers it says the answer carries.
 */
export async function expectDocumented(gatewayUrl: string, method: string, url: string, status: number, headers: Headers, body: unknown) {
  const contentType = headers.get("content-type");
  if (method === "HEAD" || !contentType?.startsWith("application/json")) return;
  const { doc, ajv, routes } = await load(gatewayUrl);
  const path = new URL(url, "http://x").pathname;
  const route = routes.find((r) => r.pattern.test(path));
  const operation = route && doc.paths[route.path]![method.toLowerCase()];
  let ref = "openapi#/components/schemas/Error";
  if (operation) {
    const key = String(status) in operation.responses ? String(status) : "default";
    expect(operation.responses[key], `${method} ${route.path} ${status} is not in the document`).toBeDefined();
    expect(operation.responses[key]!.content?.["application/json"], `${method} ${route.path} ${status} answers JSON`).toBeDefined();
    for (const [name, header] of Object.entries(operation.responses[key]!.headers ?? {})) {
      if (header.required) expect(headers.get(name), `${method} ${route.path} ${status} carries ${name}`).not.toBeNull();
    }
    ref = `openapi#/${pointer("paths", route.path, method.toLowerCase(), "responses", key, "content", "application/json", "schema")}`;
  } else {
    // Undocumented: only refusals (404, 405) answer there.
    expect(status, `${method} ${path} answered ${status}, undocumented`).toBeGreaterThanOrEqual(400);
  }
  const validate = ajv.getSchema(ref)!;
  if (!validate(body)) {
    expect.fail(`${method} ${path} ${status} does not match the document: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(body)}`);
  }
}

/**
 * Fails the test when a webhook the notifier sent does not match the
 * document's `webhooks` (gateway/schemas.ts): its body, and each header
 * parameter, present where required and matching its schema where sent.
 */
export function expectDocumentedWebhook(received: { headers: Record<string, string | string[] | undefined>; body: string }) {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  (addFormats as unknown as (a: unknown) => void)(ajv);
  const operation = WEBHOOKS.paymentCompleted.post;
  const body = ajv.compile(operation.requestBody.content["application/json"].schema);
  if (!body(JSON.parse(received.body))) expect.fail(`the webhook's body does not match the document: ${ajv.errorsText(body.errors)}\n${received.body}`);
  for (const parameter of operation.parameters) {
    const value = received.headers[parameter.name.toLowerCase()];
    if (value === undefined) {
      expect(parameter.required, `the webhook carries ${parameter.name}`).toBe(false);
      continue;
    }
    const header = ajv.compile(parameter.schema);
    if (!header(value)) expect.fail(`the webhook's ${parameter.name} does not match the document: ${ajv.errorsText(header.errors)} (${String(value)})`);
  }
}

// The REST contract as a document: /openapi.json (OpenAPI 3.1, from the
// route schemas) lints clean with a standard linter, names every route, and
// /docs works offline. That every answer matches it is checked by api().
import { execFile } from "node:child_process";
import http from "node:http";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WEBHOOKS } from "../gateway/schemas.js";
import { type Stack, startStack } from "./support/stack.js";

const REDOCLY = fileURLToPath(new URL("../node_modules/.bin/redocly", import.meta.url));

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

describe("/openapi.json", () => {
  it("documents every REST route in OpenAPI 3.1", async () => {
    const res = await fetch(`${stack.gatewayUrl}/openapi.json`);
    expect(res.status).toBe(200);
    const doc = await res.json();
    expect(doc.openapi).toBe("3.1.0");
    expect(Object.keys(doc.paths).sort()).toEqual(
      [
        "/healthz",
        "/readyz",
        "/v1/links",
        "/v1/links/{id}",
        "/v1/links/{id}/expire",
        "/v1/links/{id}/payment",
        "/v1/links/{id}/events",
        "/v1/links/{id}/events/{eventId}/redeliver",
        "/link/{id}",
        "/link/{id}/pay",
      ].sort(),
    );
    expect(Object.keys(doc.paths["/v1/links"])).toEqual(["post", "get"]);
    expect(doc.paths["/v1/links"].post.requestBody.content["application/json"].schema.required).toEqual(["type", "data"]);
    expect(doc.paths["/link/{id}/pay"].post.requestBody.content["application/json"].schema.required).toEqual(["payment_method"]);
    expect(doc.paths["/v1/links"].get.parameters.map((p: { name: string }) => p.name)).toEqual(
      expect.arrayContaining(["limit", "starting_after", "status", "client-id"]),
    );
  });

  it("declares Client-Id once, as a header parameter, and a Bearer key only where PAYLINK_AUTH=api-key asks for one", async () => {
    // Declared as a security scheme too, the docs page sent Client-Id twice, joined into "m1, m1": another client.
    const schemes = async (url: string) => {
      const doc = await (await fetch(`${url}/openapi.json`)).json();
      const inHeader = Object.values((doc.components?.securitySchemes ?? {}) as Record<string, { in?: string; name?: string }>)
        .filter((s) => s.in === "header")
        .map((s) => s.name);
      return { security: doc.security ?? [], inHeader };
    };
    expect(await schemes(stack.gatewayUrl)).toEqual({ security: [], inHeader: [] });
    const keyed = await startStack({ auth: "api-key" });
    try {
      expect(await schemes(keyed.gatewayUrl)).toEqual({ security: [{ apiKey: [] }], inHeader: [] });
    } finally {
      await keyed.close();
    }
  });

  it("documents the headers a client acts on: Location, Retry-After, WWW-Authenticate, Idempotent-Replayed, X-Request-Id and the limiter's", async () => {
    type Headers = Record<string, { required?: boolean }>;
    const doc = await (await fetch(`${stack.gatewayUrl}/openapi.json`)).json();
    const limiter = ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"];
    // Present on every answer so described: required, so that generated clients type them as present.
    const required = (headers: Headers) => Object.keys(headers).filter((name) => headers[name]!.required);
    const create = doc.paths["/v1/links"].post.responses;
    expect(Object.keys(create["201"].headers)).toEqual(["x-request-id", "location", "idempotent-replayed", ...limiter]);
    expect(required(create["201"].headers)).toEqual(["x-request-id", "location"]);
    expect(required(create["401"].headers)).toEqual(["x-request-id", "www-authenticate"]);
    for (const [path, methods] of Object.entries(doc.paths as Record<string, Record<string, { responses: Record<string, { headers?: Headers }> }>>)) {
      for (const [method, operation] of Object.entries(methods)) {
        expect(required(operation.responses["503"]?.headers ?? {}), `${method} ${path} 503`).toEqual(["x-request-id", "retry-after"]);
        for (const [status, response] of Object.entries(operation.responses)) {
          expect(response.headers?.["x-request-id"]?.required, `${method} ${path} ${status}`).toBe(true);
          // The limiter's, while a limit is on: every answer of /v1 and pay, none elsewhere.
          const limited = path.startsWith("/v1/") || path === "/link/{id}/pay";
          for (const name of limiter) expect(response.headers?.[name], `${method} ${path} ${status} ${name}`).toEqual(limited ? expect.objectContaining({ description: expect.stringMatching(/^While /) }) : undefined);
        }
      }
    }
    const pay = doc.paths["/link/{id}/pay"].post.responses;
    expect(required(pay["429"].headers)).toEqual(["x-request-id", "retry-after"]);
    // A pay retried with its key answers the first payment again, marked as create's replays are; another payment with it, 422.
    expect(Object.keys(pay["200"].headers)).toEqual(["x-request-id", "idempotent-replayed", ...limiter]);
    expect(pay["422"].description).toMatch(/Idempotency-Key/);
    for (const path of ["/v1/links/{id}/expire", "/v1/links/{id}/events/{eventId}/redeliver"]) {
      expect(doc.paths[path].post.description, path).toMatch(/Takes no body.*Unknown field/);
    }
  });

  it("describes the completion webhook (OpenAPI 3.1 webhooks), which the notifier's tests check what they receive against", async () => {
    const doc = await (await fetch(`${stack.gatewayUrl}/openapi.json`)).json();
    expect(doc.webhooks).toEqual(JSON.parse(JSON.stringify(WEBHOOKS)));
    expect(Object.keys(doc.webhooks.paymentCompleted.post.requestBody.content["application/json"].schema.properties)).toEqual(["link_id", "payment_id", "transaction_id"]);
  });

  it("names each page the checkout answers with: paid (409) and expired (410) beside 404 and 503", async () => {
    const doc = await (await fetch(`${stack.gatewayUrl}/openapi.json`)).json();
    const page = doc.paths["/link/{id}"].get.responses;
    expect(Object.keys(page)).toEqual(["200", "404", "409", "410", "503", "default"]);
    for (const status of ["409", "410"]) expect(Object.keys(page[status].content), status).toEqual(["text/html"]);
  });

  it("names every 404 a sub-resource answers: its own beside the link's", async () => {
    const doc = await (await fetch(`${stack.gatewayUrl}/openapi.json`)).json();
    expect(doc.paths["/v1/links/{id}/payment"].get.responses["404"].description).toMatch(/`Link not found` or `Payment not found`/);
    expect(doc.paths["/v1/links/{id}/events/{eventId}/redeliver"].post.responses["404"].description).toMatch(/`Link not found` or `Event not found`/);
  });

  it("names the 413 and 415 of each route that reads a JSON body, with their messages", async () => {
    const doc = await (await fetch(`${stack.gatewayUrl}/openapi.json`)).json();
    for (const operation of [doc.paths["/v1/links"].post, doc.paths["/link/{id}/pay"].post]) {
      expect(operation.responses["413"].description).toMatch(/`Request body too large`/);
      expect(operation.responses["415"].description).toMatch(/`Content-Type must be application\/json`/);
    }
  });

  it("passes a standard OpenAPI linter (redocly lint, recommended rules)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "paylink-openapi-"));
    try {
      const file = join(dir, "openapi.json");
      await writeFile(file, await (await fetch(`${stack.gatewayUrl}/openapi.json`)).text());
      const { stdout, stderr } = await promisify(execFile)(REDOCLY, ["lint", "--format=summary", file], {
        cwd: dir,
        timeout: 60_000,
        env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" },
      });
      expect(`${stdout}${stderr}`).toContain("Your API description is valid");
      expect(`${stdout}${stderr}`).not.toMatch(/You have \d+ warning/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("/docs", () => {
  it("serves the docs page and its assets from the gateway itself, with no CDN", async () => {
    const page = await fetch(`${stack.gatewayUrl}/docs`);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain("swagger-ui");
    const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(assets.filter((a) => /^(https?:)?\/\//.test(a))).toEqual([]);
    for (const asset of assets.filter((a) => a.endsWith(".js") || a.endsWith(".css"))) {
      const res = await fetch(new URL(asset, `${stack.gatewayUrl}/docs/`));
      await res.arrayBuffer();
      expect(res.status, asset).toBe(200);
    }
  });
});

describe("/docs", () => {
  it.each([
    ["POST", "/docs"],
    ["POST", "/docs/"],
    ["PUT", "/docs/json"],
    ["DELETE", "/docs/static/index.html"],
  ])("answers %s %s with the contract's 405 and Allow, as every known path does", async (method, path) => {
    const res = await fetch(`${stack.gatewayUrl}${path}`, { method });
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET, HEAD");
    expect(await res.json()).toEqual({ error: "Method not allowed" });
  });
});

describe("/docs/static", () => {
  // The static files' own refusals had said only "Forbidden" and "Bad Request".
  it.each([
    ["/docs/static/../../package.json", 404, "Not found"],
    ["/docs/static/..%5c..%5cpackage.json", 404, "Not found"],
    ["/docs/static/a%00b.js", 400, "Malformed request URL"],
  ])("answers %s, which names no file of the docs, in the contract's words", async (path, status, error) => {
    // node:http sends the path as given; fetch would resolve the dots first.
    const { port } = new URL(stack.gatewayUrl);
    const res = await new Promise<{ status: number; body: string; cache: string | undefined }>((resolve, reject) =>
      http
        .get({ host: "127.0.0.1", port, path }, (answer) => {
          let body = "";
          answer.on("data", (chunk) => (body += chunk)).on("end", () => resolve({ status: answer.statusCode!, body, cache: answer.headers["cache-control"] }));
        })
        .on("error", reject),
    );
    expect([res.status, JSON.parse(res.body), res.cache]).toEqual([status, { error }, "no-store"]);
  });
});

// The benchmark's yardstick: the REST create and get of the contract in one
// process (node:http + postgres.js, no hop, no framework), on the same
// database server as the service. It checks what a careful one-file
// implementation would (Client-Id, JSON, the create rules that matter for
// these bodies, ownership, status as of now) and uses prepared statements.
// Usage: tsx test/bench/baseline.ts <database url>; it listens on a port the
// system gives it, and tells its parent which ({ port }).
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { v7 as uuidv7 } from "uuid";
import postgres from "postgres";

const [databaseUrl] = process.argv.slice(2);
const sql = postgres(databaseUrl!, { max: 10, onnotice: () => {} });
await sql`CREATE TABLE IF NOT EXISTS baseline_links (
  id text PRIMARY KEY, client_id text NOT NULL, status text NOT NULL, data jsonb NOT NULL,
  metadata jsonb NOT NULL, expires_at timestamptz NOT NULL, created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL)`;

let BASE = "";
const CURRENCIES = new Set(Intl.supportedValuesOf("currency"));

type Json = Record<string, any>;
class Bad extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text), ...headers });
  res.end(text);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > 65536) reject(new Bad(413, "Request body too large"));
      else chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

function validate(body: Json): { expiresIn: number; data: Json; metadata: Json } {
  for (const key of Object.keys(body)) {
    if (!["type", "expires_in", "data", "metadata"].includes(key)) throw new Bad(400, `Unknown field ${key}`);
  }
  if (body.type !== "payment") throw new Bad(400, "type must be payment");
  const expiresIn = body.expires_in ?? 43200;
  if (!Number.isInteger(expiresIn) || expiresIn < 60 || expiresIn > 86400) {
    throw new Bad(400, "expires_in must be an integer from 60 to 86400");
  }
  const data = body.data;
  if (typeof data !== "object" || data === null) throw new Bad(400, "data is required");
  const amount = data.amount;
  if (typeof amount !== "object" || amount === null) throw new Bad(400, "data.amount is required");
  if (typeof amount.value !== "number" || !(amount.value > 0) || amount.value > 1e9) {
    throw new Bad(400, "data.amount.value must be greater than 0");
  }
  const currency = typeof amount.currency === "string" ? amount.currency.toUpperCase() : "";
  if (!CURRENCIES.has(currency)) throw new Bad(400, "data.amount.currency must be an ISO 4217 code");
  const digits = new Intl.NumberFormat("en", { style: "currency", currency }).resolvedOptions().maximumFractionDigits ?? 2;
  if (Math.abs(Math.round(amount.value * 10 ** digits) - amount.value * 10 ** digits) > 1e-6) {
    throw new Bad(400, "data.amount.value has too many decimals");
  }
  if (data.description === undefined && data.items === undefined) throw new Bad(400, "data.description or data.items is required");
  if (data.description !== undefined && (typeof data.description !== "string" || !data.description.trim() || data.description.length > 1000)) {
    throw new Bad(400, "data.description must be 1 to 1000 characters");
  }
  const metadata = body.metadata ?? {};
  if (typeof metadata !== "object" || metadata === null) throw new Bad(400, "metadata must be an object");
  for (const [key, value] of Object.entries(metadata)) {
    if (typeof value !== "string" || key.length > 40 || value.length > 2048) throw new Bad(400, `metadata.${key} must be a string`);
  }
  return { expiresIn, data: { ...data, amount: { ...amount, currency } }, metadata };
}

function toJson(row: Json, now: Date) {
  const expired = row.status === "created" && now >= row.expires_at;
  return {
    id: row.id,
    url: `${BASE}/link/${row.id}`,
    type: "payment",
    status: expired ? "expired" : row.status,
    data: row.data,
    client_id: row.client_id,
    expires_at: row.expires_at.toISOString(),
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    metadata: row.metadata,
  };
}

async function handle(req: IncomingMessage, res: ServerResponse) {
  const clientId = req.headers["client-id"];
  if (typeof clientId !== "string" || !clientId.trim()) throw new Bad(400, "Client ID header is required");
  const url = req.url ?? "/";
  if (url === "/v1/links" && req.method === "POST") {
    if (!/^application\/json\b/i.test(req.headers["content-type"] ?? "")) throw new Bad(415, "Content-Type must be application/json");
    let body: unknown;
    try {
      body = JSON.parse(await readBody(req));
    } catch (err) {
      if (err instanceof Bad) throw err;
      throw new Bad(400, "Invalid JSON data");
    }
    if (typeof body !== "object" || body === null || Array.isArray(body)) throw new Bad(400, "Invalid JSON data");
    const input = validate(body as Json);
    const now = new Date();
    const [row] = await sql`INSERT INTO baseline_links ${sql({
      id: `lnk-${uuidv7()}`,
      client_id: clientId,
      status: "created",
      data: sql.json(input.data as never),
      metadata: sql.json(input.metadata as never),
      expires_at: new Date(now.getTime() + input.expiresIn * 1000),
      created_at: now,
      updated_at: now,
    })} RETURNING *`;
    return send(res, 201, toJson(row!, now), { location: `/v1/links/${row!.id}` });
  }
  const match = /^\/v1\/links\/([^/?]+)$/.exec(url);
  if (match && req.method === "GET") {
    const [row] = await sql`SELECT * FROM baseline_links WHERE id = ${decodeURIComponent(match[1]!)}`;
    if (!row) throw new Bad(404, "Link not found");
    if (row.client_id !== clientId) throw new Bad(403, "Unauthorized access");
    const now = new Date();
    const link = toJson(row, now);
    if (link.status === "used") throw new Bad(409, "Link has already been used");
    if (link.status === "expired") throw new Bad(410, "Link has expired");
    return send(res, 200, link);
  }
  throw new Bad(404, "Not found");
}

const server = createServer((req, res) => {
  handle(req, res).catch((err) => {
    if (err instanceof Bad) send(res, err.status, { error: err.message });
    else send(res, 500, { error: "Internal server error" });
  });
});
server.keepAliveTimeout = 60_000;
// Port 0: a port picked beforehand could be taken meanwhile (by any process's
// outgoing connection: the service's, started first, opens dozens).
server.listen(0, "127.0.0.1", () => {
  const { port } = server.address() as AddressInfo;
  BASE = `http://localhost:${port}`;
  process.send?.({ port });
});
process.on("SIGTERM", () => {
  server.close();
  void sql.end({ timeout: 2 }).then(() => process.exit(0));
});

// One webhook attempt: build the signed request, POST it, classify the answer.
// Plain node:http(s) rather than fetch, because the SSRF guard has to sit in
// the socket's own DNS lookup, and because redirects must not be followed.
import http from "node:http";
import https from "node:https";
import { isIP } from "node:net";
import type { AddressPolicy } from "./address-policy.js";
import { RefusedAddressError } from "./address-policy.js";
import { sign } from "./signature.js";

export const USER_AGENT = "paylink-notifier/0.1";

export interface Webhook {
  url: string;
  /** The event id: the same on every attempt, so receivers can de-duplicate. */
  id: string;
  apiKey: string;
  linkId: string;
  paymentId: string;
  transactionId: string;
}

export type Outcome =
  | { kind: "delivered"; status: number }
  /** 410: the receiver asked us to stop. */
  | { kind: "gone"; status: number }
  /** Worth retrying: any other status (in `status`), a timeout, a network error. */
  | { kind: "failed"; error: string; status?: number }
  /** Never worth retrying: the URL or its address is not allowed. */
  | { kind: "refused"; error: string };

export interface DelivererOptions {
  policy: AddressPolicy;
  timeoutMs?: number;
  now?: () => number;
}

const ERROR_SNIPPET = 200;

export function createDeliverer(opts: DelivererOptions) {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const now = opts.now ?? Date.now;
  // Keep-alive: most merchants get many webhooks, and a warm connection is
  // most of the latency saved. A reused socket was checked when it connected.
  const agents = {
    "http:": new http.Agent({ keepAlive: true, maxSockets: 64 }),
    "https:": new https.Agent({ keepAlive: true, maxSockets: 64 }),
  };

  async function deliver(hook: Webhook): Promise<Outcome> {
    let url: URL;
    try {
      url = new URL(hook.url);
    } catch {
      return { kind: "refused", error: `not a valid URL: ${hook.url}` };
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      return { kind: "refused", error: `unsupported scheme ${url.protocol}` };
    }
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    if (isIP(host)) {
      const reason = opts.policy.refuse(host);
      if (reason) return { kind: "refused", error: reason };
    }

    const body = JSON.stringify({
      link_id: hook.linkId,
      payment_id: hook.paymentId,
      transaction_id: hook.transactionId,
    });
    const timestamp = Math.floor(now() / 1000);
    const headers: Record<string, string> = {
      "Content-Type": "application/json",
      "Content-Length": String(Buffer.byteLength(body)),
      "User-Agent": USER_AGENT,
      "Webhook-Id": hook.id,
      "Webhook-Timestamp": String(timestamp),
    };
    if (hook.apiKey) {
      // api_key is printable ASCII (the LinkService refuses anything else),
      // so the header carries it exactly as the merchant configured it.
      headers["Api-Key"] = hook.apiKey;
      headers["Webhook-Signature"] = sign(hook.apiKey, hook.id, timestamp, body);
    }
    return post(url, headers, body);
  }

  function post(url: URL, headers: Record<string, string>, body: string): Promise<Outcome> {
    const protocol = url.protocol as "http:" | "https:";
    const client = protocol === "https:" ? https : http;
    return new Promise<Outcome>((resolve) => {
      let settled = false;
      let timer: NodeJS.Timeout | undefined;
      const finish = (outcome: Outcome) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(outcome);
      };
      const onResponse = (res: http.IncomingMessage) => {
        const status = res.statusCode ?? 0;
        let snippet = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          if (snippet.length < ERROR_SNIPPET) snippet += chunk.slice(0, ERROR_SNIPPET - snippet.length);
        });
        // The answer counts once the whole response is in, within the time limit.
        res.on("end", () => finish(classify(status, snippet)));
        res.on("error", (err) => finish({ kind: "failed", error: `response: ${err.message}` }));
      };
      let req: http.ClientRequest;
      try {
        req = client.request(url, { method: "POST", headers, agent: agents[protocol], lookup: opts.policy.lookup }, onResponse);
      } catch (err) {
        // A header Node will not send: no later attempt can do better.
        finish({ kind: "refused", error: `cannot build the request: ${(err as Error).message}` });
        return;
      }
      timer = setTimeout(() => {
        finish({ kind: "failed", error: `no answer within ${timeoutMs} ms` });
        req.destroy();
      }, timeoutMs);
      req.on("error", (err) => {
        if (err instanceof RefusedAddressError) finish({ kind: "refused", error: err.message });
        else finish({ kind: "failed", error: `${(err as NodeJS.ErrnoException).code ?? "error"}: ${err.message}` });
      });
      req.end(body);
    });
  }

  return {
    deliver,
    close() {
      agents["http:"].destroy();
      agents["https:"].destroy();
    },
  };
}

function classify(status: number, snippet: string): Outcome {
  if (status >= 200 && status < 300) return { kind: "delivered", status };
  if (status === 410) return { kind: "gone", status };
  const detail = snippet.trim() ? `: ${snippet.trim()}` : "";
  if (status >= 300 && status < 400) {
    return { kind: "failed", status, error: `HTTP ${status} (redirects are not followed)${detail}` };
  }
  return { kind: "failed", status, error: `HTTP ${status}${detail}` };
}

export type Deliverer = ReturnType<typeof createDeliverer>;

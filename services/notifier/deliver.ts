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

/**
 * `error` is for the merchant's delivery log and may name their host and the
 * address it resolved to. `category` says only what kind of failure it was,
 * never where: it is what may travel through NATS (the dead letter), which
 * the contract keeps free of webhook addresses.
 */
export type Outcome =
  | { kind: "delivered"; status: number }
  /** 410: the receiver asked us to stop. */
  | { kind: "gone"; status: number }
  /** Worth retrying: any other status (in `status`), a timeout, a network error. */
  | { kind: "failed"; error: string; category: string; status?: number }
  /** Never worth retrying: the URL or its address is not allowed. */
  | { kind: "refused"; error: string; category: string };

export interface DelivererOptions {
  policy: AddressPolicy;
  timeoutMs?: number;
  now?: () => number;
  /** Told each time a request is sent again after a reused connection's reset, so operators can see how often receivers close idle connections under us. */
  onResend?: () => void;
}

const ERROR_SNIPPET = 200;
/**
 * What is read of an answer after it has settled, so that a small body
 * leaves the socket fit for keep-alive; a larger one costs the connection.
 */
const DISCARD_MAX = 64 * 1024;
/**
 * The most an answer's status line and headers may take. Node's 16 KiB had
 * failed a 2xx with 20 KiB of headers (cookies, say) before its status was
 * read, so the receiver got the event on every attempt and it was
 * dead-lettered all the same. Past this, the answer is a failure that says so.
 */
const ANSWER_HEAD_MAX = 256 * 1024;

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
      return { kind: "refused", error: `not a valid URL: ${hook.url}`, category: "not a valid URL" };
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      const error = `unsupported scheme ${url.protocol}`;
      return { kind: "refused", error, category: error };
    }
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    if (isIP(host)) {
      const refused = opts.policy.refuse(host);
      if (refused) return { kind: "refused", error: refused.reason, category: `${REFUSED_BY_POLICY}: ${refused.kind}` };
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
    return post(url, headers, body, hook.apiKey);
  }

  function post(url: URL, headers: Record<string, string>, body: string, apiKey: string): Promise<Outcome> {
    const protocol = url.protocol as "http:" | "https:";
    const client = protocol === "https:" ? https : http;
    return new Promise<Outcome>((resolve) => {
      let settled = false;
      const finish = (outcome: Outcome) => {
        if (settled) return;
        settled = true;
        resolve(outcome);
      };
      // Once a status line is in, the time limit settles on it rather than on "no answer".
      let answered: (() => Outcome) | undefined;
      const onResponse = (res: http.IncomingMessage) => {
        const status = res.statusCode ?? 0;
        res.on("close", () => clearTimeout(timer));
        // Whatever settled the answer, the rest of the body is read only so
        // far: a receiver streaming without end holds no socket for long.
        let read = 0;
        const drain = (length: number) => {
          read += length;
          if (settled && read > DISCARD_MAX) res.destroy();
        };
        if ((status >= 200 && status < 300) || status === 410) {
          // The contract acknowledges on a 2xx within the limit, not on the
          // body: a slow or endless body after it must not turn it into a
          // failure, nor hold the attempt. A 410 is its status alone too.
          finish(classify(status, ""));
          res.on("data", (chunk: Buffer) => drain(chunk.length));
          return;
        }
        // Read past the snippet by the longest secret, so that one the
        // receiver echoes across the cut is hidden whole (withoutSecrets).
        const secrets = secretsOf(apiKey, url);
        const room = ERROR_SNIPPET + (secrets[0]?.spelling.length ?? 0);
        let text = "";
        const answer = () => classify(status, withoutSecrets(text, secrets).slice(0, ERROR_SNIPPET));
        answered = answer;
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          text += chunk.slice(0, room - text.length);
          if (text.length >= room) finish(answer());
          drain(chunk.length);
        });
        res.on("end", () => finish(answer()));
        // The status is the receiver's answer even when its body breaks off.
        res.on("error", () => finish(answer()));
      };
      let req: http.ClientRequest | undefined;
      const send = (again: boolean) => {
        try {
          req = client.request(
            url,
            // Again on a socket of its own: the pool's other idle ones may be just as closed.
            { method: "POST", headers, agent: again ? false : agents[protocol], lookup: opts.policy.lookup, maxHeaderSize: ANSWER_HEAD_MAX },
            onResponse,
          );
        } catch (err) {
          // A header Node will not send: no later attempt can do better.
          clearTimeout(timer);
          finish({ kind: "refused", error: `cannot build the request: ${(err as Error).message}`, category: "cannot build the request" });
          return;
        }
        const sent = req;
        sent.on("error", (err) => {
          // A kept-alive socket the receiver closed while it sat idle, reset
          // as we reused it, before any answer (Node's documented case): sent
          // once more at once, where it had cost an attempt and its wait.
          if (!again && !answered && !settled && sent.reusedSocket && (err as NodeJS.ErrnoException).code === "ECONNRESET") {
            opts.onResend?.();
            return send(true);
          }
          clearTimeout(timer);
          // A status already in is the receiver's answer, even when the connection then breaks (a reset mid-body).
          finish(answered?.() ?? failure(err));
        });
        sent.end(body);
      };
      // The limit covers the whole exchange, body included, settled or not.
      const timer = setTimeout(() => {
        const error = `no answer within ${timeoutMs} ms`;
        finish(answered?.() ?? { kind: "failed", error, category: error });
        req?.destroy();
      }, timeoutMs);
      send(false);
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

interface Secret {
  spelling: string;
  shownAs: string;
}

/**
 * Shorter query values (`v=2`) are taken for settings, not secrets; and a
 * shorter api_key or password is hidden only where it stands alone, not
 * inside a word (an api_key `k` had made `flaky` into `fla[api_key]y`).
 */
const SECRET_MIN = 8;

/**
 * What a receiver must not get back into our logs and the link's events by
 * echoing its request ("invalid api key: ...", a dump of the headers, the URL
 * it was called at): the link's api_key, and the webhook URL's password (as
 * written, decoded, and inside the Basic Authorization header Node sends for
 * it, or for a user alone) and query values, each also as a JSON string
 * spells it. Longest first, so that a secret holding another is hidden whole.
 */
function secretsOf(apiKey: string, url: URL): Secret[] {
  const found = new Map<string, string>();
  const add = (value: string, shownAs: string) => {
    if (!value || found.has(value)) return;
    found.set(value, shownAs);
    found.set(JSON.stringify(value).slice(1, -1), shownAs);
  };
  add(apiKey, "[api_key]");
  if (url.username || url.password) {
    // As Node sends them: `user:password` decoded, `token:` for a URL that
    // names a user only (https://token@host, a secret of its own).
    add(Buffer.from(`${decoded(url.username)}:${decoded(url.password)}`).toString("base64"), "[credentials]");
    if (url.password) {
      add(url.password, "[password]");
      add(decoded(url.password), "[password]");
    }
  }
  // Each value as written and as decoded (a form's `+` is a space).
  for (const pair of url.search.slice(1).split("&")) {
    const value = pair.slice(pair.indexOf("=") + 1);
    if (!pair.includes("=") || value.length < SECRET_MIN) continue;
    add(value, "[query value]");
    add(decoded(value.replaceAll("+", " ")), "[query value]");
  }
  return [...found].map(([spelling, shownAs]) => ({ spelling, shownAs })).sort((a, b) => b.spelling.length - a.spelling.length);
}

const decoded = (text: string) => {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
};

/** A failed answer's text without the secrets: it is logged, stored with the attempt and shown in the link's events. */
const withoutSecrets = (text: string, secrets: Secret[]) =>
  secrets.reduce(
    (hidden, { spelling, shownAs }) =>
      spelling.length >= SECRET_MIN
        ? hidden.replaceAll(spelling, shownAs)
        : hidden.replace(new RegExp(`(?<![\\p{L}\\p{N}_-])${escapeRegExp(spelling)}(?![\\p{L}\\p{N}_-])`, "gu"), shownAs),
    text,
  );

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");

function classify(status: number, snippet: string): Outcome {
  if (status >= 200 && status < 300) return { kind: "delivered", status };
  if (status === 410) return { kind: "gone", status };
  const detail = snippet.trim() ? `: ${snippet.trim()}` : "";
  if (status >= 300 && status < 400) {
    const category = `HTTP ${status} (redirects are not followed)`;
    return { kind: "failed", status, error: `${category}${detail}`, category };
  }
  return { kind: "failed", status, error: `HTTP ${status}${detail}`, category: `HTTP ${status}` };
}

const REFUSED_BY_POLICY = "refused by the address policy";

/**
 * A request that got no answer. Node's messages name the host or ip:port
 * ("getaddrinfo ENOTFOUND shop.example", "connect ECONNREFUSED
 * 203.0.113.7:443", a certificate's alt names): they stay in `error`, and
 * the category keeps only the error code.
 */
function failure(err: Error): Outcome {
  if (err instanceof RefusedAddressError) {
    const kinds = err.kinds.join(", ");
    // The merchant learns what sort of address their name led to, but not
    // our resolver's answer: that may be our own network's layout.
    const error = `refused to connect to ${err.hostname}: every address it resolves to is refused (${kinds})`;
    return { kind: "refused", error, category: `${REFUSED_BY_POLICY}: ${kinds}` };
  }
  const { code, syscall } = err as NodeJS.ErrnoException;
  if (code === "HPE_HEADER_OVERFLOW") {
    const category = `the answer's headers pass ${ANSWER_HEAD_MAX / 1024} KiB`;
    return { kind: "failed", error: category, category };
  }
  const error = `${code ?? "error"}: ${err.message}`;
  const name = code && /^[A-Z0-9_]{1,64}$/.test(code) ? code : "unknown";
  let category = `network error (${name})`;
  // getaddrinfo's, or a name server's silence (webhook-lookup.ts: ETIMEOUT from a query).
  if (syscall === "getaddrinfo" || syscall?.startsWith("query") || name === "ENOTFOUND" || name.startsWith("EAI_")) {
    category = `DNS lookup failed (${name})`;
  } else if (name === "ECONNREFUSED") category = "connection refused";
  else if (/^ERR_(TLS|SSL)_|CERT|^UNABLE_TO_|^EPROTO$/.test(name)) category = `TLS error (${name})`;
  return { kind: "failed", error, category };
}

export type Deliverer = ReturnType<typeof createDeliverer>;

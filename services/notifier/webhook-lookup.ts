// How a webhook's host name becomes addresses, off Node's thread pool.
// dns.lookup runs getaddrinfo on libuv's pool, where at most two lookups run
// at once: a merchant whose name servers do not answer held both for the
// resolver's whole timeout with a few attempts, and every other merchant's
// webhook queued behind them until its own 10 s ran out (measured: 16 such
// attempts, and another receiver's 200 never asked for). Here names go to
// DNS through c-ares (dns.Resolver: its own sockets, any number in flight,
// bounded by its own timeout). Only a name DNS says does not exist goes on to
// getaddrinfo, which also reads /etc/hosts (localhost, a sandbox's names)
// and the search domains; DNS has already answered for it, so it is quick.
import dns from "node:dns";
import type { LookupFunction } from "node:net";

/** The addresses DNS holds for `hostname` in one family; rejects with c-ares's error. */
export type Resolve = (hostname: string, family: 4 | 6) => Promise<string[]>;

export interface WebhookLookupOptions {
  /** The resolved addresses a socket may reach; throws (the socket's error) when there are none. */
  keep?: (addresses: dns.LookupAddress[], hostname: string) => dns.LookupAddress[];
  /** Default: systemResolve(). */
  resolve?: Resolve;
  /** For names DNS does not hold. Default: dns.lookup. */
  fallback?: typeof dns.lookup;
}

// No answer from DNS is its own failure, never a reason to ask getaddrinfo.
const NOT_IN_DNS = new Set(["ENOTFOUND", "ENODATA"]);

/**
 * DNS through c-ares, of the system's name servers (/etc/resolv.conf) unless
 * `servers` are given. A name server that does not answer costs about 5 s
 * (1.5 s, then 3 s: measured), half the attempt's 10 s, which leaves the rest
 * to connect and be answered.
 */
export function systemResolve(servers?: string[]): Resolve {
  const resolver = new dns.promises.Resolver({ timeout: 1_500, tries: 2 });
  if (servers) resolver.setServers(servers);
  return (hostname, family) => (family === 4 ? resolver.resolve4(hostname) : resolver.resolve6(hostname));
}

export function createWebhookLookup(opts: WebhookLookupOptions = {}): LookupFunction {
  const resolve = opts.resolve ?? systemResolve();
  const fallback = opts.fallback ?? dns.lookup;

  async function addresses(hostname: string, family: number): Promise<dns.LookupAddress[]> {
    const families: (4 | 6)[] = family === 4 ? [4] : family === 6 ? [6] : [4, 6];
    const answers = await Promise.allSettled(families.map((f) => resolve(hostname, f)));
    const found = answers.flatMap((answer, i) =>
      answer.status === "fulfilled" ? answer.value.map((address) => ({ address, family: families[i]! })) : [],
    );
    if (found.length > 0) return found;
    const errors = answers.map((answer) => (answer as PromiseRejectedResult).reason as NodeJS.ErrnoException);
    const failed = errors.find((err) => !NOT_IN_DNS.has(err.code ?? ""));
    if (failed) throw failed;
    return new Promise((resolve, reject) =>
      fallback(hostname, { family, all: true }, (err, all) => (err ? reject(err) : resolve(all))),
    );
  }

  // Node calls a socket's lookup with `all: true` when it may try several
  // addresses (autoSelectFamily), and without it otherwise.
  return (hostname, options, callback) => {
    addresses(hostname, options.family === "IPv4" ? 4 : options.family === "IPv6" ? 6 : Number(options.family ?? 0)).then(
      (found) => {
        let all: dns.LookupAddress[];
        try {
          all = opts.keep ? opts.keep(found, hostname) : found;
        } catch (err) {
          return callback(err as NodeJS.ErrnoException, "", 0);
        }
        if (options.all) return (callback as unknown as (e: null, a: dns.LookupAddress[]) => void)(null, all);
        callback(null, all[0]!.address, all[0]!.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, "", 0),
    );
  };
}

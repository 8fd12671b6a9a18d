// How a webhook's host name becomes addresses, off Node's thread pool.
// dns.lookup runs getaddrinfo on libuv's pool, where at most two lookups run
// at once: a merchant whose name servers do not answer held both for the
// resolver's whole timeout with a few attempts, and every other merchant's
// webhook queued behind them until its own 10 s ran out (measured: 16 such
// attempts, and another receiver's 200 never asked for). Here names go to
// DNS through c-ares (dns.Resolver: its own sockets, any number in flight),
// LOOKUP_TIMEOUT_MS at most. A name DNS answers for without addresses (it
// does not exist; the server refused or failed) goes on to getaddrinfo, which
// also reads /etc/hosts (a sandbox's names) and the search domains; DNS has
// answered already, so it is quick. Only a name server's silence is final.
// localhost is the hosts file's alone.
import dns from "node:dns";
import type { LookupFunction } from "node:net";
import { onSilence } from "../shared/with-timeout.js";

/** The addresses DNS holds for `hostname` in one family; rejects with c-ares's error. */
export type Resolve = (hostname: string, family: 4 | 6) => Promise<string[]>;

export interface WebhookLookupOptions {
  /** The resolved addresses a socket may reach; throws (the socket's error) when there are none. */
  keep?: (addresses: dns.LookupAddress[], hostname: string) => dns.LookupAddress[];
  /** Default: systemResolve(). */
  resolve?: Resolve;
}

/** The whole lookup, both families and every name server, within half the attempt's 10 s. */
export const LOOKUP_TIMEOUT_MS = 5_000;
const isLocalhost = (hostname: string) => /(^|\.)localhost\.?$/i.test(hostname);

/**
 * DNS through c-ares, of the system's name servers (/etc/resolv.conf) unless
 * `servers` are given: 1.5 s a try, two tries of each server (one server that
 * does not answer costs about 4 s, measured; more, up to LOOKUP_TIMEOUT_MS).
 */
export function systemResolve(servers?: string[]): Resolve {
  const resolver = new dns.promises.Resolver({ timeout: 1_500, tries: 2 });
  if (servers) resolver.setServers(servers);
  return (hostname, family) => (family === 4 ? resolver.resolve4(hostname) : resolver.resolve6(hostname));
}

export function createWebhookLookup(opts: WebhookLookupOptions = {}): LookupFunction {
  const resolve = opts.resolve ?? systemResolve();

  const fromSystem = (hostname: string, family: number) =>
    new Promise<dns.LookupAddress[]>((resolve, reject) =>
      dns.lookup(hostname, { family, all: true }, (err, all) => (err ? reject(err) : resolve(all))),
    );

  async function addresses(hostname: string, family: number): Promise<dns.LookupAddress[]> {
    if (isLocalhost(hostname)) return fromSystem(hostname, family);
    const families: (4 | 6)[] = family === 4 ? [4] : family === 6 ? [6] : [4, 6];
    let cancel: (() => void) | undefined;
    const silence = new Promise<never>((_, reject) => {
      cancel = onSilence(LOOKUP_TIMEOUT_MS, () =>
        reject(Object.assign(new Error(`DNS did not answer for ${hostname} within ${LOOKUP_TIMEOUT_MS} ms`), { code: "ETIMEOUT", syscall: "query" })),
      );
    });
    const answers = await Promise.race([Promise.allSettled(families.map((f) => resolve(hostname, f))), silence]).finally(cancel);
    const found = answers.flatMap((answer, i) =>
      answer.status === "fulfilled" ? answer.value.map((address) => ({ address, family: families[i]! })) : [],
    );
    if (found.length > 0) return found;
    const errors = answers.map((answer) => (answer as PromiseRejectedResult).reason as NodeJS.ErrnoException);
    const silent = errors.find((err) => err.code === "ETIMEOUT");
    if (silent) throw silent;
    return fromSystem(hostname, family);
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

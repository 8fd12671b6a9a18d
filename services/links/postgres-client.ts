import postgres from "postgres";
import { bracketedHosts } from "../shared/config.js";

type Options = postgres.Options<Record<string, never>>;

/** postgres.js on a DATABASE_URL, IPv6 addresses in brackets included (bracketedHosts says why). */
export function connectPostgres(url: string, options: Options) {
  // The driver takes a list of hosts and one of ports, one per host (as it
  // makes them from a URL); its types know only a single host.
  const hosts = bracketedHosts(url) as Pick<Options, "host" | "port"> | undefined;
  return postgres(url, { ...options, ...hosts });
}

// The SSRF guard. In production a webhook may only reach public unicast
// addresses; the merchant chooses the URL, and it must not become a way into
// our network or the cloud metadata service. The check runs inside the
// socket's DNS lookup, on the very addresses the socket then connects to, so
// a name that resolves to a public address for a pre-check and to 127.0.0.1
// a moment later (DNS rebinding) gains nothing. IP-literal hosts skip DNS and
// are checked on their own.
import type { LookupAddress } from "node:dns";
import type { LookupFunction } from "node:net";
import ipaddr from "ipaddr.js";
import { createWebhookLookup, type Resolve } from "./webhook-lookup.js";

/**
 * Why an address is refused. `kind` names the sort of address and never the
 * address itself, so it may go where addresses may not (NATS).
 */
export interface Refusal {
  kind: string;
  reason: string;
}

/** Thrown (through the socket) when every resolved address is refused. */
export class RefusedAddressError extends Error {
  readonly code = "ERR_WEBHOOK_ADDRESS_REFUSED";
  constructor(
    readonly hostname: string,
    readonly refusals: Refusal[],
  ) {
    super(`refused to connect to ${hostname}: ${refusals.map((r) => r.reason).join("; ")}`);
  }

  /** The kinds of address the name resolved to: what the merchant may be told, not our resolver's answer. */
  get kinds(): string[] {
    return [...new Set(this.refusals.map((r) => r.kind))];
  }
}

// The link-local, unique-local and CGNAT ones are refused by range anyway,
// and named here for the message. Azure's WireServer is not: 168.63.129.16
// is public address space, so no range check catches it, yet inside Azure
// it answers any VM, without authentication, with the VM agent's
// configuration (goal state, extension settings). Only this entry keeps a
// webhook away from it.
const CLOUD_METADATA = new Set(["169.254.169.254", "fd00:ec2::254", "100.100.100.200", "168.63.129.16"]);

/**
 * Why an address may not be reached from production, or undefined when it
 * may. Only ipaddr.js's "unicast" range passes: loopback, private,
 * link-local, CGNAT (100.64/10), unspecified, multicast, broadcast, reserved,
 * unique-local and the IPv6 transition ranges are all refused. IPv4-mapped
 * and NAT64 addresses are judged by the IPv4 address inside them.
 */
export function refusal(ip: string): Refusal | undefined {
  if (!ipaddr.isValid(ip)) return { kind: "not an IP address", reason: `not an IP address: ${ip}` };
  let addr = ipaddr.process(ip); // ::ffff:a.b.c.d becomes a.b.c.d
  if (addr.kind() === "ipv6" && addr.range() === "rfc6052" && ip.toLowerCase().startsWith("64:ff9b::")) {
    const bytes = addr.toByteArray().slice(12);
    addr = ipaddr.fromByteArray(bytes);
  }
  // ::a.b.c.d (IPv4-compatible, deprecated by RFC 4291; "[::127.0.0.1]"
  // becomes ::7f00:1) is unicast to ipaddr.js: judge the IPv4 inside it.
  if (addr.kind() === "ipv6") {
    const bytes = addr.toByteArray();
    if (bytes.slice(0, 12).every((b) => b === 0) && addr.range() === "unicast") {
      const inner = ipaddr.fromByteArray(bytes.slice(12));
      return { kind: "IPv4-compatible", reason: `${addr.toString()} is IPv4-compatible (${inner.toString()}), a deprecated form` };
    }
  }
  const normal = addr.toString();
  if (CLOUD_METADATA.has(normal)) return { kind: "cloud metadata", reason: `${normal} is a cloud metadata address` };
  const range = addr.range();
  if (range !== "unicast") return { kind: range, reason: `${normal} is in the ${range} range` };
  return undefined;
}

export interface AddressPolicy {
  /** Why a literal address is refused, or undefined. */
  refuse(ip: string): Refusal | undefined;
  /** The lookup a webhook's socket uses. */
  lookup: LookupFunction;
}

/**
 * Test deployments deliver to loopback and private receivers; production does
 * not. `resolve`: how names are asked of DNS (webhook-lookup.ts's default).
 */
export function addressPolicy(env: "test" | "production", resolve?: Resolve): AddressPolicy {
  if (env === "test") return { refuse: () => undefined, lookup: createWebhookLookup({ resolve }) };
  return { refuse: refusal, lookup: createWebhookLookup({ keep: allowedOnly, resolve }) };
}

/** The addresses production may reach; a RefusedAddressError when there are none. */
function allowedOnly(addresses: LookupAddress[], hostname: string): LookupAddress[] {
  const allowed = addresses.filter((a) => refusal(a.address) === undefined);
  if (allowed.length === 0) throw new RefusedAddressError(hostname, addresses.map((a) => refusal(a.address)!));
  return allowed;
}

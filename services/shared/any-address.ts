// Where a service listens when nothing names a host: every address, IPv6's as
// well as IPv4's, as Node's own listen(port) does. A service bound to
// "0.0.0.0" cannot be reached over IPv6 at all (an IPv6-only cluster, a
// customer with IPv6); "::" takes both on a dual-stack kernel. A kernel built
// or booted without IPv6 cannot bind "::", and then IPv4's is all there is.
import net from "node:net";

let answer: Promise<string> | undefined;

export function anyAddress(): Promise<string> {
  answer ??= new Promise((resolve) => {
    const probe = net.createServer();
    probe.once("error", () => resolve("0.0.0.0"));
    probe.listen(0, "::", () => probe.close(() => resolve("::")));
  });
  return answer;
}

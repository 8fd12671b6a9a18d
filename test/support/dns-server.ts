// A DNS server for tests, over real UDP: it answers the A records it is
// given, says NXDOMAIN for names it does not know, and never answers the
// names it is told to ignore, as a merchant's dead name servers would not.
import dgram from "node:dgram";

export async function startDnsServer(records: { a?: Record<string, string>; silent?: string[] }) {
  const socket = dgram.createSocket("udp4");
  const asked: string[] = [];
  socket.on("message", (query, from) => {
    // The question: labels up to a zero byte, then its type and class.
    let at = 12;
    const labels: string[] = [];
    while (query[at]! > 0) {
      labels.push(query.toString("latin1", at + 1, at + 1 + query[at]!));
      at += 1 + query[at]!;
    }
    const name = labels.join(".").toLowerCase();
    const type = query.readUInt16BE(at + 1);
    const question = query.subarray(12, at + 5);
    asked.push(name);
    if (records.silent?.includes(name)) return;
    const address = records.a?.[name];
    const answers =
      address && type === 1
        ? [Buffer.concat([Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]), Buffer.from(address.split(".").map(Number))])]
        : [];
    const header = Buffer.alloc(12);
    query.copy(header, 0, 0, 2); // the query's id
    header.writeUInt16BE(0x8180 | (name in (records.a ?? {}) ? 0 : 3), 2); // an answer, recursion available; NXDOMAIN for a stranger
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(answers.length, 6);
    socket.send(Buffer.concat([header, question, ...answers]), from.port, from.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  return {
    server: `127.0.0.1:${socket.address().port}`,
    /** The names asked, in order. */
    asked,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

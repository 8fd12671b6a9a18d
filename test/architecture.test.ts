// The shape DESIGN.md asks for, checked on the import graph (madge): no
// import cycle anywhere, and a gateway that knows the LinkService only by
// its protobuf API, never by its code (nor the notifier's).
import { fileURLToPath } from "node:url";
import madge from "madge";
import { beforeAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("..", import.meta.url));
let graph: Awaited<ReturnType<typeof madge>>;

beforeAll(async () => {
  graph = await madge(["gateway", "services", "test"], { baseDir: root, fileExtensions: ["ts"], excludeRegExp: [/^proto\/gen\//] });
}, 60_000);

describe("the import graph", () => {
  it("has no cycle", () => {
    expect(graph.circular()).toEqual([]);
  });

  it("keeps the gateway apart from the LinkService's and the notifier's code", () => {
    const crossing = Object.entries(graph.obj())
      .filter(([file]) => file.startsWith("gateway/"))
      .flatMap(([file, deps]) => deps.filter((d) => /^services\/(links|notifier)\//.test(d)).map((d) => `${file} -> ${d}`));
    expect(crossing).toEqual([]);
    // The gateway's plugins are there to be found.
    expect(graph.obj()["gateway/app.ts"]).toEqual(expect.arrayContaining(["gateway/rest.ts", "gateway/probes.ts", "gateway/checkout/routes.ts"]));
  });
});

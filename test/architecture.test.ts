// The shape DESIGN.md asks for, checked on the import graph (madge): no
// import cycle anywhere, and a gateway that knows the LinkService only by
// its protobuf API, never by its code (nor the notifier's). And one rule of
// the suite's own, checked on its sources.
import { readdirSync, readFileSync } from "node:fs";
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

describe("the suite", () => {
  it("locks, alters or adds to the schema only on a database of the test file's own", () => {
    // Test files run two at a time on the run's shared database: a lock held
    // there for a second or two holds up every create of the file beside it,
    // which then answers 503 at the gateway's deadline, and a trigger there
    // counts the other file's writes too; each fails at random.
    const dir = `${root}test`;
    const sharing = readdirSync(dir)
      .filter((file) => file.endsWith(".test.ts"))
      .filter((file) => {
        const source = readFileSync(`${dir}/${file}`, "utf8");
        const locks = /\b(lock|alter) table\b|\bcreate (table|trigger|function)\b/i.test(source);
        const shared = /inject\("databaseUrl"\)/.test(source) || /startStack\((?!\{[^)]*databaseUrl)/.test(source);
        return locks && shared;
      });
    expect(sharing).toEqual([]);
  });
});

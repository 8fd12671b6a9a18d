// Which release a process runs, for its start line and paylink_build_info:
// during a rolling upgrade an operator tells the copies apart by it. Read
// from package.json, found above this file whether it runs from the sources
// (tsx, a checkout) or from dist/ (the image).
import { readFileSync } from "node:fs";

function packageVersion(): string {
  let dir = new URL(".", import.meta.url);
  for (let up = 0; up < 5; up++, dir = new URL("..", dir)) {
    try {
      const pkg = JSON.parse(readFileSync(new URL("package.json", dir), "utf8")) as { name?: unknown; version?: unknown };
      if (pkg.name === "paylink" && typeof pkg.version === "string") return pkg.version;
    } catch {
      // Not here: one level up.
    }
  }
  return "unknown";
}

export const RELEASE = { version: packageVersion(), node: process.version } as const;

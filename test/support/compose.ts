// docker-compose.yml as the tests read it (there is no Docker engine here):
// parsed once, with its anchors and merge keys resolved.
import { readFileSync } from "node:fs";
import path from "node:path";
import { parse as parseYaml } from "yaml";
import type { Role } from "./processes.js";
import { ROOT } from "./processes.js";

export interface ComposeService {
  command?: string[];
  init?: boolean;
  ports?: string[];
  healthcheck?: { test: string[] };
  environment?: Record<string, string>;
  depends_on?: string[] | Record<string, { condition: string }>;
}

export const compose = parseYaml(readFileSync(path.join(ROOT, "docker-compose.yml"), "utf8"), { merge: true }) as {
  services: Record<string, ComposeService>;
  configs: Record<string, { content: string }>;
};

/** The role a compose service of ours runs (the image behind an init): links, links-1, links-2... */
export const roleOf = (name: string) => /^(links|gateway|notifier)(-\d+)?$/.exec(name)?.[1] as Role | undefined;

// Fastify's Ajv checks every request against its route's schema
// (schemas.ts) before the handler runs, all errors at once. The contract
// answers one message, the first failure in its order of checks, in its own
// words, and some of its rules are the LinkService's, which words them for
// REST and gRPC alike. So a route that takes input names, in one table, the
// places where the gateway judges, in the contract's order, and its words
// for each schema keyword there; rules no schema can say (decimal places,
// lone surrogates, cross-field rules) report from code at those places.
// The first failure among them answers. A schema failure no place claims
// is the LinkService's: the route asks it for its words.
import type { FastifyRequest, FastifySchemaValidationError } from "fastify";
import { badRequest, INVALID_JSON } from "./errors.js";
import type { GatewayMetrics } from "./metrics.js";

type Keyword = "type" | "required" | "additionalProperties" | "minItems" | "pattern" | "enum";
/**
 * A keyword's failures at a place that the LinkService words, on a route
 * that cannot ask it first (no validate_only): the gateway lets the request
 * through, and the LinkService refuses it in its own words.
 */
export const THEIRS = Symbol("the LinkService words it");
/** A message, or how to word one from the field's path (`data.items[0].name`) and Ajv's error, or THEIRS. */
type Words = string | ((path: string, error: FastifySchemaValidationError) => string) | typeof THEIRS;

export interface Place {
  /** A JSON pointer into the request part: `#` stands for any array index, `*` for any key. A name without `/` is outside it (a header). */
  at: string;
  /** The gateway's words for the keywords it judges here. */
  words?: Partial<Record<Keyword, Words>>;
  /** Rules in code report here. */
  code?: true;
  /** Judged only when this holds of the whole part. */
  when?: (data: unknown) => boolean;
}

/** Where a rule in code failed (a JSON pointer, or a place's name) and the message, or how to word it from the field's path. */
export type Report = (at: string, message: string | ((path: string) => string)) => void;

export interface RequestRules {
  part: "body" | "querystring";
  /** In the contract's order of checks. */
  places: readonly Place[];
  /** Rules no schema keyword can say, each failure reported at a place marked `code`. */
  code?: (data: unknown, req: FastifyRequest, report: Report) => void;
}

/** Ajv's errors for one part of a request, as Fastify attaches them (attachValidation). */
export interface SchemaFailure {
  validation: FastifySchemaValidationError[];
  validationContext: string;
}

const ARTICLE: Record<string, string> = { string: "a string", number: "a number", integer: "an integer", object: "an object", array: "an array" };
const join = (path: string, key: string) => (path ? `${path}.${key}` : key);

export const unknownField = (path: string) => `Unknown field ${quoted(path)}`;

/**
 * A name the caller made up, as an error repeats it: cut after 100
 * characters (a 60 KB field name had come back whole in the error body).
 */
export function quoted(name: string): string {
  if (name.length <= 100) return name;
  const characters = Array.from(name);
  return characters.length <= 100 ? name : `${characters.slice(0, 100).join("")}…`;
}

/** The words for JSON's shape, which are the gateway's wherever it judges. */
export const SHAPE = {
  type: (path: string, e: FastifySchemaValidationError) => (path ? `${path} must be ${ARTICLE[String(e.params.type)] ?? e.params.type}` : INVALID_JSON),
  required: (path: string) => `${path} is required`,
  additionalProperties: (path: string, e: FastifySchemaValidationError) => unknownField(join(path, String(e.params.additionalProperty))),
} satisfies Partial<Record<Keyword, Words>>;

interface CompiledPlace extends Place {
  segments: string[];
  /** The first place of its wildcard's block, so items are judged one after another, each whole. */
  block: number;
  wildcard: number;
}

/** A pointer's segments; a place's name (no leading `/`) is one segment no pointer has. */
const segmentsOf = (pointer: string) => (pointer === "" ? [] : pointer.startsWith("/") ? pointer.slice(1).split("/") : [`\0${pointer}`]);
const unescape = (segment: string) => (segment.includes("~") ? segment.replace(/~1/g, "/").replace(/~0/g, "~") : segment);

function compile(places: readonly Place[]): CompiledPlace[] {
  const compiled = places.map((place) => {
    const segments = segmentsOf(place.at);
    return { ...place, segments, wildcard: segments.findIndex((s) => s === "#" || s === "*"), block: 0 };
  });
  for (const [i, place] of compiled.entries()) {
    const prefix = place.segments.slice(0, place.wildcard + 1).join("/");
    place.block = place.wildcard < 0 ? i : compiled.findIndex((p) => p.wildcard === place.wildcard && p.segments.slice(0, p.wildcard + 1).join("/") === prefix);
  }
  return compiled;
}

interface CompiledRules {
  places: CompiledPlace[];
  /**
   * The places that word a schema location's failures, by Ajv's schemaPath
   * (and a missing property's name): a location always fails at the same place.
   */
  claimants: Map<string, number[] | Map<string, number[]>>;
}
const compiledRules = new WeakMap<RequestRules, CompiledRules>();

function matches(place: CompiledPlace, segments: string[]): boolean {
  return (
    place.segments.length === segments.length &&
    place.segments.every((s, i) => s === segments[i] || (s === "#" && /^\d+$/.test(segments[i]!)) || s === "*")
  );
}

/** The field's path as the contract spells it: `data.items[0].name`, `metadata.order`. */
function pathOf(place: CompiledPlace, segments: string[]): string {
  let path = "";
  segments.forEach((segment, i) => {
    path = place.segments[i] === "#" ? `${path}[${segment}]` : join(path, unescape(segment));
  });
  return path;
}

/** The first failure so far: its place, its item's index or key's position there, and its words. */
interface Failure {
  index: number;
  n: number;
  pointer: string;
  /** A rule in code's words take the path alone. */
  word: Exclude<Words, typeof THEIRS>;
  error?: FastifySchemaValidationError;
}

/** A key as a JSON pointer's segment. */
export const pointerSegment = (key: string) => key.replace(/~/g, "~0").replace(/\//g, "~1");
/** The pointer of a failure: for a missing property, the property's own. */
const pointerOf = (e: FastifySchemaValidationError) =>
  e.keyword === "required" ? `${e.instancePath}/${pointerSegment(String(e.params.missingProperty))}` : e.instancePath;
/** The pointer's segment `k` (from 0), without splitting it. */
function segmentAt(pointer: string, k: number): string {
  let start = 0;
  for (let i = 0; i <= k; i++) start = pointer.indexOf("/", start) + 1;
  const end = pointer.indexOf("/", start);
  return pointer.slice(start, end < 0 ? undefined : end);
}

/** The places claiming an Ajv error, found once per schema location. */
function claimantsOf(compiled: CompiledRules, error: FastifySchemaValidationError): number[] {
  let found = compiled.claimants.get(error.schemaPath);
  let byName: Map<string, number[]> | undefined;
  if (error.keyword === "required") {
    if (!(found instanceof Map)) compiled.claimants.set(error.schemaPath, (found = new Map()));
    byName = found;
    found = byName.get(String(error.params.missingProperty));
  }
  if (Array.isArray(found)) return found;
  const segments = segmentsOf(pointerOf(error));
  const claiming = compiled.places.flatMap((p, i) => (p.words?.[error.keyword as Keyword] !== undefined && matches(p, segments) ? [i] : []));
  if (byName) byName.set(String(error.params.missingProperty), claiming);
  else compiled.claimants.set(error.schemaPath, claiming);
  return claiming;
}

/**
 * Throws the gateway's refusal of `req`, the first in the contract's order.
 * Answers the schema's failures no place claims (else undefined): rules the
 * LinkService words, for the route to ask it about. Failures a place leaves
 * to the LinkService (THEIRS) are neither thrown nor answered. A failure at
 * a place whose `when` does not hold is nobody's: the contract does not
 * judge it.
 * A 64 KiB body can fail thousands of times: each failure costs a lookup
 * and a comparison, and only the first is worded.
 */
export function judge(req: FastifyRequest, rules: RequestRules): SchemaFailure | undefined {
  let compiled = compiledRules.get(rules);
  if (!compiled) compiledRules.set(rules, (compiled = { places: compile(rules.places), claimants: new Map() }));
  const { places } = compiled;
  const data = rules.part === "body" ? req.body : req.query;
  const failed = req.validationError as SchemaFailure | undefined;
  let keyOrders: Map<number, Map<string, number>> | undefined;
  let first: Failure | undefined;

  /** Failures sort by where the contract checks them: place blocks in order, then item by item, key by key. */
  function consider(index: number, pointer: string, word: Failure["word"], error?: FastifySchemaValidationError): void {
    const place = places[index]!;
    const firstPlace = first && places[first.index]!;
    if (firstPlace && place.block > firstPlace.block) return;
    let n = 0;
    if (place.wildcard >= 0) {
      const at = segmentAt(pointer, place.wildcard);
      if (place.segments[place.wildcard] === "#") n = Number(at);
      else {
        // A key ranks by its position in its object, as the code walks it.
        keyOrders ??= new Map();
        let order = keyOrders.get(place.block);
        if (!order) {
          let parent = data as Record<string, unknown> | undefined;
          for (const s of place.segments.slice(0, place.wildcard)) parent = parent?.[s] as Record<string, unknown> | undefined;
          keyOrders.set(place.block, (order = new Map(Object.keys(parent ?? {}).map((key, i) => [key, i]))));
        }
        n = order.get(unescape(at)) ?? 0;
      }
    }
    if (!first || (place.block - firstPlace!.block || n - first.n || index - first.index) < 0) first = { index, n, pointer, word, error };
  }
  const holds = (place: CompiledPlace) => !place.when || place.when(data);

  rules.code?.(data, req, (pointer, word) => {
    const segments = segmentsOf(pointer);
    const index = places.findIndex((p) => p.code && matches(p, segments) && holds(p));
    if (index >= 0) consider(index, pointer, word);
  });
  let left: FastifySchemaValidationError[] | undefined;
  // Another part's failures (a header's, where the body is judged) are no place's.
  const judged = failed?.validationContext === rules.part;
  for (const error of failed?.validation ?? []) {
    const claiming = judged ? claimantsOf(compiled, error) : [];
    if (claiming.length === 0) (left ??= []).push(error);
    for (const index of claiming) {
      if (!holds(places[index]!)) continue;
      const word = places[index]!.words![error.keyword as Keyword]!;
      // A missing property's pointer is its parent's and its name: the item's index is in the parent's.
      if (word !== THEIRS) consider(index, error.instancePath, word, error);
      break;
    }
  }
  if (first) {
    const { word, error } = first;
    const path = pathOf(places[first.index]!, segmentsOf(error ? pointerOf(error) : first.pointer));
    throw badRequest(typeof word === "string" ? word : word(path, error!));
  }
  return left && { validation: left, validationContext: failed!.validationContext };
}

/**
 * The schema refused what the LinkService takes (or what no rule words):
 * the schema is wrong, and the contract tests would say so. Answers 400
 * naming Ajv's error, and logs and counts it.
 */
export function schemaDisagreement(req: FastifyRequest, failed: SchemaFailure, metrics: GatewayMetrics | undefined): Error {
  req.log.error({ validation: failed.validation }, "the route schema refused a request the LinkService takes");
  metrics?.schemaDisagreements.inc();
  return badRequest(describeSchemaError(failed.validation[0]!, failed.validationContext));
}

/** A schema failure in plain words, for an answer no contract rule words: `data.description must NOT have fewer than 1 characters`. */
export function describeSchemaError(error: FastifySchemaValidationError, part = "body"): string {
  const path = segmentsOf(error.instancePath).reduce((p, s) => (/^\d+$/.test(s) ? `${p}[${s}]` : join(p, unescape(s))), "");
  return `${path || part} ${error.message ?? "is invalid"}`;
}

/** How Fastify's Ajv runs: it never changes what the code then reads, and it finds every failure for the ranking above. */
export const AJV_OPTIONS = {
  customOptions: { allErrors: true, coerceTypes: false, useDefaults: false, removeAdditional: false },
} as const;
